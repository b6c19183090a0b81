"""What every training loop over a run's handles shares (loop.py: GRPO; apps/sft: SFT).

A run restores its checkpoint if it resumes, brings the generators to the restored
version, runs its steps (the subclass's `_steps`), evaluates the final policy, and
checkpoints, whether it ran to the end, was asked to stop (Ctrl-C) or was ended by a
failure the trainer survived. `run` returns the RunRecord that summary.json is written from.
"""

import asyncio
from pathlib import Path

from forge_async.checkpoint.checkpointer import CheckpointNotWritten, Checkpointer
from forge_async.envs.remote import EnvironmentFailed
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.generators import GeneratorFailed
from forge_async.handles.run import RunHandles
from forge_async.metrics import MetricsLog
from forge_async.run_record import RunRecord
from forge_async.scoring.scorer import ScorerError, ScorerFailed
from forge_async.weights.delivery import WeightDelivery

# Failures after which the trainer is fine: the run ends early but checkpoints and reports.
RUN_ENDING = (GeneratorFailed, ScorerFailed, ScorerError, EnvironmentFailed)


class TrainingLoop:
    def __init__(
        self,
        steps: int,
        checkpoint_every_steps: int,
        handles: RunHandles,
        delivery: WeightDelivery,
        metrics: MetricsLog,
        record: RunRecord,
        checkpointer: Checkpointer | None = None,
        evaluations: EvaluationSchedule | None = None,
    ):
        """`record` is updated as the run goes (a resumed run's is restored by `run`);
        `evaluations`: None, never evaluate."""
        self.steps = steps
        self.checkpoint_every_steps = checkpoint_every_steps
        self.handles = handles
        self.delivery = delivery
        self.metrics = metrics
        self.record = record
        self.checkpointer = checkpointer
        self.evaluations = evaluations
        self._stop = asyncio.Event()

    def request_stop(self, reason: str) -> None:
        """End the run after the step in flight (the run still checkpoints and reports)."""
        self.record.stop_reason = reason
        self._stop.set()

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
            await self._steps()
            if self.evaluations is not None:
                await self.evaluations.final(interrupted=self._stop.is_set())
        except RUN_ENDING as err:
            self.record.failure = str(err)
        finally:
            await self._close()
        if self.checkpointer is not None:
            await self._checkpoint()
        return self.record

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
            self.delivery.publish(self.record.version)

    async def _checkpoint(self) -> None:
        """Save the run; one that cannot be saved (a full disk) ends it, as a failure, after
        this step: no further checkpoint is tried, and the last good one is named for resuming."""
        try:
            saved = await self.checkpointer.save(self.record.step, self.state_dict(), self.handles)
        except CheckpointNotWritten as err:
            self.record.failure = self.record.failure or str(err)
            self.checkpointer = None
            self._stop.set()
            return
        self.record.checkpoint_s += saved["seconds"]
        print(
            f"checkpoint step {self.record.step}: {saved['seconds']:.2f}s, "
            f"{saved['bytes'] / 2**20:.1f} MiB -> {saved['path']}",
            flush=True,
        )

    async def _close(self) -> None:
        if self.evaluations is not None:
            self.evaluations.cancel()  # a no-op unless a failure ended the run while it ran
        await self.delivery.close()
        self.metrics.close()

    def _steps_left(self) -> bool:
        return self.record.step < self.steps and not self._stop.is_set()

    def _due_for_checkpoint(self) -> bool:
        """Every checkpoint.every_steps steps; the run's last step is saved after the loop."""
        every = self.checkpoint_every_steps
        return self.checkpointer is not None and every > 0 and self.record.step % every == 0 and self._steps_left()

    def _due_for_evaluation(self) -> bool:
        """Every eval.every_steps steps; the run's last version is evaluated after the loop."""
        return self.evaluations is not None and self.evaluations.due() and self._steps_left()
