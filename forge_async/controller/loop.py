"""What every training loop over a run's handles shares (controller/grpo_loop.py: GRPO; controller/sft_loop.py: SFT).

A run restores its checkpoint if it resumes, brings the generators to the restored
version, runs its steps (the subclass's `_steps`), evaluates the final policy, and
checkpoints, whether it ran to the end, was asked to stop (Ctrl-C) or was ended by a
failure the trainer survived. `run` returns the RunRecord that summary.json is written from.

A stop (`request_stop`: Ctrl-C, SIGTERM) has a deadline: the step in flight, the work it
drains and the final evaluation share `checkpoint.stop_grace_s`; what is still running then
is abandoned and said (RunRecord.cut_short, summary.json's `cut_short`). The checkpoint then
saves the last completed step, unless the trainer itself was abandoned mid-step: its state is
then past the record's, and nothing is saved from it.
"""

import asyncio
from collections.abc import Awaitable
from pathlib import Path

from forge_async.process import disk_full
from forge_async.checkpoint.checkpointer import CheckpointNotWritten, Checkpointer
from forge_async.observability.console import since_launch
from forge_async.envs.remote import EnvironmentFailed
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.generators import GeneratorFailed
from forge_async.handles.run import RunHandles
from forge_async.handles.trainer import StepResult
from forge_async.observability.metrics import MetricsLog
from forge_async.rollout.progress_watch import RunStalled
from forge_async.observability.record import RunRecord
from forge_async.scoring.scorer import ScorerError, ScorerFailed
from forge_async.observability.span_names import TRAIN_AND_PUSH_CALL, TRAINER_LOOP_LANE
from forge_async.observability.spans import TRACER
from forge_async.weights.delivery import WeightDelivery

# Failures after which the trainer is fine: the run ends early but checkpoints and reports.
RUN_ENDING = (GeneratorFailed, ScorerFailed, ScorerError, EnvironmentFailed, RunStalled)
CANCELLED_WITHIN_S = 2.0  # how long abandoned work is given to end once cancelled
LANE = TRAINER_LOOP_LANE  # the controller's lane for the trainer's side (observability/spans.py)


class TrainingLoop:
    def __init__(
        self,
        steps: int,
        checkpoint_every_steps: int,
        stop_grace_s: float,
        handles: RunHandles,
        delivery: WeightDelivery,
        metrics: MetricsLog,
        record: RunRecord,
        checkpointer: Checkpointer | None = None,
        evaluations: EvaluationSchedule | None = None,
    ):
        """`record` is updated as the run goes (a resumed run's is restored by `run`);
        `evaluations`: None, never evaluate; `stop_grace_s`: how long a stop waits for the step in
        flight."""
        self.steps = steps
        self.checkpoint_every_steps = checkpoint_every_steps
        self.stop_grace_s = stop_grace_s
        self.handles = handles
        self.delivery = delivery
        self.metrics = metrics
        self.record = record
        self.checkpointer = checkpointer
        self.evaluations = evaluations
        self._stop = asyncio.Event()
        self._stop_asked = asyncio.Event()
        self._stop_deadline: float | None = None  # event-loop time the grace of a stop ends at
        self.trainer_mid_step = False  # a train_and_push call was abandoned: the trainer is past the record

    def request_stop(self, reason: str) -> None:
        """End the run after the step in flight, or `stop_grace_s` from now if it is not done by then
        (the run still checkpoints and reports)."""
        self.record.stop_reason = reason
        self._stop_deadline = asyncio.get_running_loop().time() + self.stop_grace_s
        self._stop.set()
        self._stop_asked.set()

    async def run(self, resume_from: Path | None = None) -> RunRecord:
        """Train to `steps` (from a checkpoint, if given), checkpoint, return the record."""
        try:
            if resume_from is not None:
                await self._restore(resume_from)
            await self._bring_generators_to_version()
        except BaseException:
            await self._close()  # a trainer that fails while restoring: nothing to save
            raise
        self.record.start_segment()
        try:
            finished = await self._within_grace(self._steps(), "the step in flight")
            if finished and self.evaluations is not None:
                final = self.evaluations.final(interrupted=self._stop.is_set())
                await self._within_grace(final, "the final evaluation")
        except RUN_ENDING as err:
            self.record.failure = str(err)
        finally:
            await self._close()
        self.record.failure = self.record.failure or disk_full.first()
        if self.checkpointer is not None and self.trainer_mid_step:
            step = self.record.step
            self.note_cut_short(f"no checkpoint written: the trainer was still in step {step + 1}, past step {step}")
        elif self.checkpointer is not None:
            await self._checkpoint()
        return self.record

    async def _within_grace(self, work: Awaitable, what: str) -> bool:
        """`work` awaited to its end (its error raised), or until the grace of a stop asked
        meanwhile is over: then it is cancelled, `what` is said to be cut short, and False returned."""
        task = asyncio.ensure_future(work)
        grace_over = asyncio.create_task(self._grace_over())
        try:
            await asyncio.wait({task, grace_over}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()
                return True
            self.note_cut_short(f"{what} was abandoned {self.stop_grace_s:g} s after {self.record.stop_reason}")
            return False
        finally:
            grace_over.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CANCELLED_WITHIN_S)

    async def _grace_over(self) -> None:
        """Back when a stop has been asked and its grace has run out."""
        await self._stop_asked.wait()
        assert self._stop_deadline is not None  # request_stop sets it before the event
        await asyncio.sleep(self._stop_deadline - asyncio.get_running_loop().time())

    def _time_to_drain(self) -> float:
        """How long the end of the steps may wait for the generate calls in flight: what is left of
        a stop's grace, or the whole grace when the steps are all done."""
        if self._stop_deadline is None:
            return self.stop_grace_s
        return max(0.0, self._stop_deadline - asyncio.get_running_loop().time())

    def note_cut_short(self, what: str) -> None:
        """`what` a stop abandoned or left unsaved: said now, and in summary.json."""
        self.record.cut_short.append(what)
        print(f"{since_launch()} stopping: {what}", flush=True)

    async def _train_and_push(self, batch: list) -> StepResult:
        """The trainer's step on `batch`, its weights pushed. If the call is abandoned (a stop past
        its grace), `trainer_mid_step` stays set: the trainer finishes the step on its own, so its
        state is past the record's and must not be checkpointed as the record's step."""
        self.trainer_mid_step = True
        with TRACER.span(TRAIN_AND_PUSH_CALL, LANE):
            result = await self.handles.trainer.train_and_push(batch, self.delivery.push_targets)
        self.trainer_mid_step = False
        return result

    async def _steps(self) -> None:
        """The loop's steps, until `_steps_left()` says none are."""
        raise NotImplementedError

    def _state(self) -> dict:
        """What the subclass checkpoints beside the record and the metrics."""
        return {}

    async def _load_state(self, state: dict) -> None:
        """The subclass's part of a checkpoint's state (`_state`), restored."""

    def state_dict(self) -> dict:
        return {**self.record.state_dict(), **self._state(), "metrics": self.metrics.state_dict()}

    async def _restore(self, path: Path) -> None:
        state = await Checkpointer.restore(path, self.handles)
        self.record.load_state_dict(state)
        self.metrics.load_state_dict(state["metrics"])
        await self._load_state(state)
        print(f"resumed from {path} at step {self.record.step} (version {self.record.version})", flush=True)

    async def _bring_generators_to_version(self) -> None:
        """A resumed run's generators start from the initial weights: publish the restored version."""
        if self.record.version > 0:
            await self.handles.trainer.push_weights(self.delivery.push_targets)
            self.delivery.publish(self.record.version, resumed=True)

    async def _checkpoint(self) -> None:
        """Save the run; one that cannot be saved (a full disk) ends it, as a failure, after
        this step: no further checkpoint is tried, and the last good one is named for resuming."""
        assert self.checkpointer is not None  # callers check it
        try:
            saved = await self.checkpointer.save(self.record.step, self.state_dict(), self.handles)
        except CheckpointNotWritten as err:
            self.record.failure = self.record.failure or str(err)
            self.checkpointer = None
            self._stop.set()
            return
        self.record.checkpoint_s += saved.seconds
        print(
            f"checkpoint step {self.record.step}: {saved.seconds:.2f}s, {saved.bytes / 2**20:.1f} MiB -> {saved.path}",
            flush=True,
        )

    async def _close(self) -> None:
        if self.evaluations is not None:
            self.evaluations.cancel()  # a no-op unless a failure ended the run while it ran
        await self.delivery.close()
        self.metrics.close()

    def _steps_left(self) -> bool:
        """Steps to go, no stop asked, and no write has found the disk full (process/disk_full.py)."""
        return self.record.step < self.steps and not self._stop.is_set() and disk_full.first() is None

    def _due_for_checkpoint(self) -> bool:
        """Every checkpoint.every_steps steps; the run's last step is saved after the loop."""
        every = self.checkpoint_every_steps
        return self.checkpointer is not None and every > 0 and self.record.step % every == 0 and self._steps_left()

    def _due_for_evaluation(self) -> bool:
        """Every eval.every_steps steps; the run's last version is evaluated after the loop."""
        return self.evaluations is not None and self.evaluations.due() and self._steps_left()
