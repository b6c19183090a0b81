"""When evaluations run, and on which generator.

At the start, every eval.every_steps steps, and once more after the last step
(unless that version was just evaluated, or the run was interrupted). Each one
takes the next live generator in turn, its weights pinned meanwhile (one lost with
its host mid-evaluation abandons that evaluation, said). In async mode an
evaluation runs beside training, one at a time: one due while the last still
runs is skipped, and said; in sync mode it runs between steps. The console reads in
version order: the start's evaluation (of version 0) prints before step 1's line, which
waits for it (MetricsLog.hold_step_lines) while training goes on.
"""

import asyncio
from dataclasses import dataclass, field

from forge_async.evaluation.evaluator import Evaluator
from forge_async.handles.generators import GeneratorLost, GeneratorPool
from forge_async.observability.metrics import MetricsLog, measured_nothing
from forge_async.observability.record import RunRecord
from forge_async.observability.span_names import EVALUATE
from forge_async.observability.spans import TRACER
from forge_async.weights.delivery import WeightDelivery

LANE = "evaluation"  # the controller's lane for evaluations (observability/spans.py)


@dataclass
class EvaluationSchedule:
    evaluator: Evaluator
    every_steps: int  # eval.every_steps
    generators: GeneratorPool
    delivery: WeightDelivery
    record: RunRecord  # where evaluations are counted, and their first and last rows kept
    metrics: MetricsLog
    _in_flight: asyncio.Task | None = field(default=None, init=False)  # async mode

    def due(self) -> bool:
        """At every eval.every_steps steps (the caller checks that steps are left)."""
        return self.record.step % self.every_steps == 0

    def start_beside(self) -> None:
        """Async mode: evaluate the newest version the generators hold, beside training."""
        if self._in_flight is not None:
            if not self._in_flight.done():
                print(f"evaluation at step {self.record.step} skipped: the previous one still runs", flush=True)
                return
            self._in_flight.result()  # its error, if it failed
        if self.record.step == 0:  # the start's evaluation: its line comes before step 1's
            self.metrics.hold_step_lines()
        self._in_flight = asyncio.create_task(self.evaluate())

    async def evaluate(self) -> None:
        """One evaluation on the next live generator in turn, its weights pinned meanwhile."""
        live = self.generators.live()
        index = live[self.record.evaluations % len(live)]
        self.record.evaluations += 1
        try:
            with TRACER.span(EVALUATE, LANE):
                row = await self.evaluator.evaluate(self.generators[index].generate, self.delivery.pinned(index))
        except GeneratorLost:
            print(f"evaluation at step {self.record.step} abandoned: generator {index} is lost", flush=True)
            self.metrics.release_step_lines()
            return
        row["time/wall_s"] = self.record.wall_s()
        if not measured_nothing(row):  # the summary's figures are of evaluations that measured
            self.record.eval_first = self.record.eval_first or row
            self.record.eval_last = row
        self.metrics.log_eval(self.record.step, row)

    async def final(self, interrupted: bool) -> None:
        """After the last step: the evaluation in flight, then one of the final policy (unless the
        run was interrupted, or that version was just evaluated)."""
        if self._in_flight is not None:
            await self._in_flight
        last = self.record.eval_last
        if interrupted or (last is not None and last["eval/version"] == self.record.version):
            return
        await self.delivery.wait_until_loaded(self.record.version)
        await self.evaluate()

    def cancel(self) -> None:
        """A failure ends the run: the evaluation in flight, if any, is abandoned."""
        if self._in_flight is not None:
            self._in_flight.cancel()
