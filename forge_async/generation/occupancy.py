"""How full a generator's engine batch runs, engine step by engine step: the straggler measure.

A generate call's samples share one engine batch; as the short ones finish, the batch
thins out and the step's fixed cost is spread over fewer sequences, while the finished
ones wait for their call's stragglers. Each engine step records the samples still running
and the samples the calls in flight asked for: a step with fewer than half of those
running is a straggler step (`generator/under_half_frac`, docs/metrics.md).

Kept as running totals (three counters, nothing per step): the controller reads them at
every training step (handles/generators/pool.py: `GeneratorPool.occupancy_totals`) and reports
the window between two reads (observability/occupancy_window.py).
"""

from dataclasses import dataclass


@dataclass
class Occupancy:
    """Totals over a generator's engine steps so far."""

    steps: int = 0  # engine steps with a sample running
    running: int = 0  # samples running, summed over those steps
    under_half: int = 0  # those steps with fewer than half the in-flight calls' samples running

    def record(self, running: int, asked: int) -> None:
        """One engine step: `running` samples not finished, of the `asked` the calls in flight want."""
        if running:
            self.steps += 1
            self.running += running
            self.under_half += 2 * running < asked

    def __add__(self, other: "Occupancy") -> "Occupancy":
        return Occupancy(self.steps + other.steps, self.running + other.running, self.under_half + other.under_half)

    def since(self, earlier: "Occupancy") -> "Occupancy":
        """The totals since `earlier` (a respawned generator counts from zero again: all of its own)."""
        if self.steps < earlier.steps:
            return self
        return Occupancy(
            self.steps - earlier.steps, self.running - earlier.running, self.under_half - earlier.under_half
        )
