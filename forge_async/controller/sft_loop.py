"""Supervised fine-tuning's loop (apps.sft) and its metrics log.

One step: `prompts_per_step` demonstrations drawn from the task's training prompts
(tasks/demonstrations.py) -> one optimizer step of the trainer with the sft objective, and the
new weights published (train_and_push), so that the generators hold what the trainer has and
an evaluation measures it (evaluation/). controller/loop.py: what it shares with GRPO's loop.
"""

import statistics
import time
from pathlib import Path

from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.config import CheckpointConfig
from forge_async.controller.loop import LANE, TrainingLoop
from forge_async.observability.record import RunRecord, StepEnds
from forge_async.tasks.demonstrations import Demonstrations
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.run import RunHandles
from forge_async.observability.metrics import MetricsLog
from forge_async.observability.sinks import MetricSink
from forge_async.observability.span_names import STEP
from forge_async.observability.spans import TRACER
from forge_async.weights.delivery import WeightDelivery


class SFTMetricsLog(MetricsLog):
    """metrics.jsonl and the sinks as GRPO's, with SFT's figures and console line: the loss, its
    moving average (train/loss_smoothed), the learning rate, the training throughput."""

    def __init__(self, run_dir: Path, total_steps: int, sinks: list[MetricSink], resume_after_step: int | None):
        # target_reward: for GRPO's entropy warning, which SFT's rows do not raise
        super().__init__(run_dir, total_steps, 1.0, sinks, resume_after_step=resume_after_step)

    @property
    def loss_smoothed(self) -> float:
        return statistics.fmean(self._recent) if self._recent else float("nan")

    def log(self, record: dict) -> None:
        self._recent.append(record["train/loss"])
        record["train/loss_smoothed"] = self.loss_smoothed
        self.write(record)
        step, wall = record["step"], record["time/wall_s"]
        eta = wall / step * (self.total_steps - step) if step else 0.0
        self.print_step_line(
            f"step {step:4d}/{self.total_steps} | loss {record['train/loss']:.3f} "
            f"(avg{self._recent.maxlen} {self.loss_smoothed:.3f}) | lr {record['train/lr']:.2e} | "
            f"{record['train/tokens_per_s']:,.0f} tok/s | {wall:.1f}s, ETA {eta:.0f}s"
        )


class SFTLoop(TrainingLoop):
    """Steps on demonstrations over a run's ready handles; evaluations beside them (one at a
    time, on a generator pinned to one version), checkpoints every checkpoint.every_steps."""

    def __init__(
        self,
        steps: int,
        prompts_per_step: int,
        checkpoint: CheckpointConfig,
        handles: RunHandles,
        demonstrations: Demonstrations,
        delivery: WeightDelivery,
        metrics: SFTMetricsLog,
        record: RunRecord,
        checkpointer: Checkpointer | None = None,
        evaluations: EvaluationSchedule | None = None,
    ):
        super().__init__(
            steps,
            checkpoint.every_steps,
            checkpoint.stop_grace_s,
            handles,
            delivery,
            metrics,
            record,
            checkpointer,
            evaluations,
        )
        self.prompts_per_step = prompts_per_step
        self.demonstrations = demonstrations
        self.loss_ends = StepEnds()  # each step's train/loss, over every segment of the run, at both ends

    async def _steps(self) -> None:
        await self.delivery.wait_until_loaded(self.record.version)
        if self.record.step == 0 and self.evaluations is not None:
            self.evaluations.start_beside()
        while self._steps_left():
            await self._step()
            if self.evaluations is not None and self._due_for_evaluation():
                self.evaluations.start_beside()
            if self._due_for_checkpoint():
                await self._checkpoint()

    async def _step(self) -> None:
        record = self.record
        with TRACER.span(STEP, LANE):
            batch = self.demonstrations.batch(self.prompts_per_step, record.version)
            started = time.perf_counter()
            result = await self._train_and_push(batch)
            seconds = time.perf_counter() - started
        record.version, record.step = result.version, record.step + 1
        self.delivery.publish(record.version)
        record.trained += len(batch)
        tokens = sum(len(e.completion.token_ids) for e in batch)
        self.loss_ends.append(result.metrics["train/loss"])
        self.metrics.log(
            {
                "step": record.step,
                **result.metrics,
                "train/tokens_per_s": tokens / seconds,
                "policy/version": record.version,
                "samples/trained": record.trained,
                "train/tokens_trained": self.demonstrations.tokens,
                "completion/length_mean": tokens / len(batch),
                "prompt/length_mean": statistics.fmean(len(e.completion.prompt_ids) for e in batch),
                "weights/push_ms": result.push_ms,
                "weights/bytes": result.weight_bytes,
                "time/wall_s": record.wall_s(),
            }
        )

    def _state(self) -> dict:
        return {"demonstrations": self.demonstrations.state_dict(), "losses": self.loss_ends.state_dict()}

    async def _load_state(self, state: dict) -> None:
        self.demonstrations.load_state_dict(state["demonstrations"])
        self.loss_ends = StepEnds.from_state(state["losses"])
