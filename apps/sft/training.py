"""The SFT app's training half: what needs torch, TorchTitan and the actor modules.

apps/sft/main.py imports this only after the run's procs are spawned. `train` reads as
apps.grpo's does: the initial policy, the task and its demonstrations, the run's handles
(handles/spawn_run.py: the trainer, the generator(s) evaluations run on, the replay buffer,
unused), the loop, then the final policy, the timeline and summary.json.

One step: `prompts_per_step` demonstrations drawn from the task's training prompts
(forge_async/data/demonstrations.py) -> one optimizer step of the trainer with the sft
objective, and the new weights published (train_and_push), so that the generators hold
what the trainer has and an evaluation measures it (forge_async/evaluation/).
"""

import json
import shlex
import statistics
import time
from dataclasses import asdict, fields
from pathlib import Path

from transformers import AutoTokenizer

from apps.grpo.training import prepare_checkpoint, run_meshes, run_to_the_end
from apps.sft.config import SFTConfig
from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import CheckpointDirectory, step_of
from forge_async.controller.config import GRPOConfig
from forge_async.observability.console import since_launch
from forge_async.data.demonstrations import Demonstrations
from forge_async.evaluation.config import EvalConfig
from forge_async.evaluation.evaluator import build_evaluator, held_out_prompts
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.run import RunHandles
from forge_async.mesh.procs import RunProcs
from forge_async.observability.sinks import MetricSink, build_sinks
from forge_async.observability.metrics import MetricsLog
from forge_async.controller.record import RunRecord, StepEnds
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.registry import build_task
from forge_async.tasks.task import Task
from forge_async.observability.spans import TRACER
from forge_async.controller.loop import LANE, TrainingLoop
from forge_async.weights.delivery import WeightDelivery
from forge_async.weights.route import plan_route
from forge_async.observability.outputs import replace_text


async def train(config: SFTConfig, run_dir: Path, procs: RunProcs) -> dict:
    """Checkpoint, tokenizer, task and demonstrations; then the run's handles, the loop, the tidy-up."""
    view = procs.config  # config.run_config(), its weight channel chosen
    checkpoint = await prepare_checkpoint(view, run_dir, procs)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    context = config.generator.max_model_len or checkpoint.shape.max_seq_len
    room = context - config.sampling.max_tokens  # for a prompt: a demonstration may take max_tokens
    task = build_task(config.task, tokenizer, room)
    eval_prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room) if config.eval.enabled else []
    demonstrations = Demonstrations(task, tokenizer, config.sampling.max_tokens, config.seed, config.task.skip_bad_rows)
    demonstrations.check()  # a task with nothing to imitate fails here, before the meshes come up
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    print(f"{since_launch()} model {checkpoint.path} | task {task.name} | supervised fine-tuning", flush=True)

    async with run_meshes(procs, checkpoint, pad_id, run_dir) as handles:
        return await train_on(config, view, run_dir, handles, task, demonstrations, eval_prompts)


async def train_on(
    config: SFTConfig,
    view: GRPOConfig,
    run_dir: Path,
    handles: RunHandles,
    task: Task,
    demonstrations: Demonstrations,
    eval_prompts,
) -> dict:
    """The loop's collaborators, the loop, then the final policy, the timeline and the summary."""
    resume_from = CheckpointDirectory(run_dir, config.checkpoint.keep).latest_valid() if config.resume else None
    resumed_at = None if resume_from is None else step_of(resume_from)
    sinks = build_sinks(config.logging, run_dir, asdict(config), resumed_at)
    metrics = SFTMetricsLog(run_dir, config.steps, sinks, resume_after_step=resumed_at)
    delivery = WeightDelivery(handles.generators, plan_route(view, handles.generators, handles.relays))
    record = RunRecord()
    evaluations = None
    if config.eval.enabled:
        evaluator = build_evaluator(config.eval, eval_prompts, view.scorers, view.scoring, task, config.sampling, None)
        evaluations = EvaluationSchedule(
            evaluator, config.eval.every_steps, handles.generators, delivery, record, metrics
        )
    checkpointer = Checkpointer(run_dir, config.checkpoint.keep) if config.checkpoint.enabled else None
    loop = SFTLoop(config, handles, demonstrations, delivery, metrics, record, checkpointer, evaluations)

    async def summarise(final_model: str | None) -> dict:
        return write_summary(run_dir, config, loop, handles, task.skipped_rows, final_model)

    return await run_to_the_end(loop, resume_from, handles, run_dir, config.trace.enabled, summarise)


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
        print(
            f"step {step:4d}/{self.total_steps} | loss {record['train/loss']:.3f} "
            f"(avg{self._recent.maxlen} {self.loss_smoothed:.3f}) | lr {record['train/lr']:.2e} | "
            f"{record['train/tokens_per_s']:,.0f} tok/s | {wall:.1f}s, ETA {eta:.0f}s",
            flush=True,
        )


class SFTLoop(TrainingLoop):
    """Steps on demonstrations over a run's ready handles; evaluations beside them (one at a
    time, on a generator pinned to one version), checkpoints every checkpoint.every_steps
    (forge_async/controller/loop.py: what it shares with GRPO's loop)."""

    def __init__(
        self,
        config: SFTConfig,
        handles: RunHandles,
        demonstrations: Demonstrations,
        delivery: WeightDelivery,
        metrics: SFTMetricsLog,
        record: RunRecord,
        checkpointer: Checkpointer | None = None,
        evaluations: EvaluationSchedule | None = None,
    ):
        super().__init__(
            config.steps, config.checkpoint.every_steps, config.checkpoint.stop_grace_s, handles, delivery, metrics,
            record, checkpointer, evaluations,
        )
        self.prompts_per_step = config.prompts_per_step
        self.demonstrations = demonstrations
        self.loss_ends = StepEnds()  # each step's train/loss, over every segment of the run, at both ends

    async def _steps(self) -> None:
        await self.delivery.wait_until_loaded(self.record.version)
        if self.record.step == 0 and self.evaluations is not None:
            self.evaluations.start_beside()
        while self._steps_left():
            await self._step()
            if self._due_for_evaluation():
                self.evaluations.start_beside()
            if self._due_for_checkpoint():
                await self._checkpoint()

    async def _step(self) -> None:
        record = self.record
        with TRACER.span("step", LANE):
            batch = self.demonstrations.batch(self.prompts_per_step, record.version)
            started = time.perf_counter()
            result = await self._train_and_push(batch)
            seconds = time.perf_counter() - started
        record.version, record.step = result.version, record.step + 1
        self.delivery.publish(record.version)
        record.trained += len(batch)
        tokens = sum(len(e.completion.token_ids) for e in batch)
        self.loss_ends.append(result.metrics["train/loss"])
        self.metrics.log({
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
        })

    def _state(self) -> dict:
        return {"demonstrations": self.demonstrations.state_dict(), "losses": self.loss_ends.state_dict()}

    async def _load_state(self, state: dict) -> None:
        self.demonstrations.load_state_dict(state["demonstrations"])
        self.loss_ends = StepEnds.from_state(state["losses"])


def write_summary(
    run_dir: Path, config: SFTConfig, loop: SFTLoop, handles: RunHandles, skipped_rows: dict, final_model: str | None
) -> dict:
    """RUN_DIR/summary.json: what the run did, from its record; returns it."""
    record, demonstrations = loop.record, loop.demonstrations
    window, loss_first, loss_last = loop.loss_ends.means()
    wall = record.wall_s()
    summary = {
        "objective": "sft",
        "steps": record.step,
        "wall_s": wall,
        "interrupted": record.stop_reason is not None,
        "stop_reason": record.stop_reason,
        # what a stop past checkpoint.stop_grace_s abandoned or did not save; [] when nothing was
        "cut_short": record.cut_short,
        "failure": record.failure,
        "trained": record.trained,  # demonstrations
        "trained_tokens": demonstrations.tokens,  # their completion tokens, EOS included
        "skipped_demonstrations": demonstrations.skipped,
        "loss_window": window,
        "loss_first": loss_first,
        "loss_last": loss_last,
        # evaluation on held-out prompts (eval.*): the rows of the first and the last, or null
        "eval_first": record.eval_first,
        "eval_last": record.eval_last,
        "samples_per_s": record.trained / wall,
        "tokens_per_s": demonstrations.tokens / wall,
        "checkpoint_s": record.checkpoint_s,
        "generator_restarts": handles.generators.restarts,
        "placement": handles.placement,
        "skipped_rows": skipped_rows,
        "final_model": final_model,
        "grpo_command": grpo_command(config, final_model),
        "run_dir": str(run_dir),
    }
    replace_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


def grpo_command(config: SFTConfig, final_model: str | None) -> str | None:
    """GRPO from the final policy: this run's task, held-out evaluation and completion budget (the
    task.* and eval.* keys set here; a reasoning-gym mix is left to the reader)."""
    if final_model is None:
        return None
    overrides = [shlex.quote(f"model.path={final_model}")]
    for section, defaults, left_out in (("task", TaskConfig(), "reasoning_gym"), ("eval", EvalConfig(), "every_steps")):
        for f in fields(defaults):
            value = getattr(getattr(config, section), f.name)
            if f.name != left_out and value != getattr(defaults, f.name):
                overrides.append(shlex.quote(f"{section}.{f.name}={_override_value(value)}"))
    overrides.append(f"sampling.max_tokens={config.sampling.max_tokens}")
    return " ".join(["python -m apps.grpo", *overrides])


def _override_value(value) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)
