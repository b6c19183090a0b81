"""The generators' engine-batch occupancy between two training steps, as metrics.

Each generator keeps running totals of its engine steps (generation/occupancy.py); the
controller reads them once a step, beside the trainer's step, and reports the difference.
A generator that does not answer within OCCUPANCY_WAIT_S (busy in a long engine step or a
weight swap, or failed) is left out of that read: the totals are cumulative, so its steps
count in the next window. Failures are the generator handles' business, not this read's.
"""

import asyncio

from forge_async.generation.occupancy import Occupancy
from forge_async.mesh.supervision import within

OCCUPANCY_WAIT_S = 2.0


class OccupancyWindow:
    def __init__(self) -> None:
        self._last: dict[int, Occupancy] = {}  # by generator index: its totals at the last read

    async def read(self, generators) -> dict[str, float]:
        """The figures of the window since the last read, over the live generators of `generators`
        (a GeneratorPool)."""
        live = generators.live()
        answers = await asyncio.gather(*(_totals(generators[index].actor) for index in live))
        return self.figures(dict(zip(live, answers)))

    def figures(self, totals: dict[int, dict | None]) -> dict[str, float]:
        """`generator/engine_steps`, `generator/running_mean` (samples running per engine step) and
        `generator/under_half_frac` over the engine steps of every generator since the last call;
        `totals`: generator index -> its `Occupancy.as_dict()`, or None (left out this time).
        Running mean and share are 0 for a window without engine steps."""
        window = Occupancy()
        for index, raw in totals.items():
            if raw is None:
                continue
            now = Occupancy(**raw)
            window = window + now.since(self._last.get(index, Occupancy()))
            self._last[index] = now
        steps = max(window.steps, 1)
        return {
            "generator/engine_steps": window.steps,
            "generator/running_mean": window.running / steps,
            "generator/under_half_frac": window.under_half / steps,
        }


async def _totals(actor) -> dict | None:
    """A generator actor's occupancy totals, or None if it has none yet or does not answer in time."""
    if actor is None:
        return None
    try:
        return await within(actor.occupancy_totals.call_one(), OCCUPANCY_WAIT_S)
    except Exception:  # a figure: the next read covers what this one missed
        return None
