"""The generators' engine-batch occupancy between two training steps, as metrics.

Each generator keeps running totals of its engine steps (generation/occupancy.py); the
controller reads them once a step, beside the trainer's step, through the generators' pool
(handles/generators/pool.py: `GeneratorPool.occupancy_totals`), and reports the difference.
A generator left out of a read (it did not answer in time) counts its steps in the next
window: the totals are cumulative.
"""

from typing import Protocol

from forge_async.generation.occupancy import Occupancy


class OccupancyTotals(Protocol):
    """Where the totals come from: the run's GeneratorPool."""

    async def occupancy_totals(self) -> dict[int, Occupancy | None]: ...


class OccupancyWindow:
    def __init__(self) -> None:
        self._last: dict[int, Occupancy] = {}  # by generator index: its totals at the last read

    async def read(self, generators: OccupancyTotals) -> dict[str, float]:
        """The figures of the window since the last read, over the generators' totals now."""
        return self.figures(await generators.occupancy_totals())

    def figures(self, totals: dict[int, Occupancy | None]) -> dict[str, float]:
        """`generator/engine_steps`, `generator/running_mean` (samples running per engine step) and
        `generator/under_half_frac` over the engine steps of every generator since the last call;
        `totals`: generator index -> its totals, or None (left out this time).
        Running mean and share are 0 for a window without engine steps."""
        window = Occupancy()
        for index, now in totals.items():
            if now is None:
                continue
            window = window + now.since(self._last.get(index, Occupancy()))
            self._last[index] = now
        steps = max(window.steps, 1)
        return {
            "generator/engine_steps": window.steps,
            "generator/running_mean": window.running / steps,
            "generator/under_half_frac": window.under_half / steps,
        }
