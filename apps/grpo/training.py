"""The GRPO app's training half: what needs torch, TorchTitan and the actor modules.

apps/grpo/main.py imports this only after the run's procs are spawned, so that
these imports overlap the procs' own start-up.

`train` tells the whole story: the initial policy, the task, the run's handles
(handles/spawn_run.py), the collaborators the loop runs with, the loop, then the final
policy, the timeline and summary.json.
"""

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path

from transformers import AutoTokenizer

from forge_async.process import disk_full
from forge_async.rollout.admission import AdmissionControl
from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import CheckpointDirectory, step_of
from forge_async.controller.config import GRPOConfig
from forge_async.observability.console import since_launch
from forge_async.tasks.registry import build_task
from forge_async.tasks.task import Task
from forge_async.envs.registry import open_environments
from forge_async.envs.runner import EnvRunner, build_env_runner, environment_factory, with_environment
from forge_async.errors import TrainerFailed
from forge_async.evaluation.evaluator import build_evaluator, held_out_prompts
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.run import RunHandles
from forge_async.controller.interrupt import stop_on_signals
from forge_async.handles.meshes import write_tiny_weights_on
from forge_async.mesh.procs import RunProcs
from forge_async.mesh.roles import TRAINER
from forge_async.handles.spawn_run import spawn_run
from forge_async.controller.grpo_loop import GRPOLoop
from forge_async.observability.sinks import build_sinks
from forge_async.observability.metrics import MetricsLog
from forge_async.models.hf_checkpoint import WEIGHTS_FILE, Checkpoint
from forge_async.models.tiny import write_tiny_config
from forge_async.controller.progress_watch import ProgressWatch
from forge_async.rollout.single_turn import Rollouts
from forge_async.rollout.multi_turn import EpisodeRollouts
from forge_async.controller.record import RunRecord
from forge_async.scoring.tier import build_tier
from forge_async.observability.outputs import replace_text, report_side_output_failure, write_side_output
from forge_async.controller.summary import write_summary
from forge_async.observability.spans import trace_events
from forge_async.controller.loop import TrainingLoop
from forge_async.weights.delivery import WeightDelivery
from forge_async.weights.route import plan_route


async def prepare_checkpoint(config: GRPOConfig, run_dir: Path, procs: RunProcs) -> Checkpoint:
    """The initial policy: model.path, or the tiny model written into the run dir, its weights
    by a trainer proc (TorchTitan is loaded there, not here: models/tiny.py)."""
    if config.model.path is not None:
        return Checkpoint.open(config.model.path)
    initial = run_dir / "initial_model"
    if not (initial / WEIGHTS_FILE).is_file():  # a resumed run already has it
        hf_config = write_tiny_config(initial, config.model.tiny)
        await write_tiny_weights_on(procs.early(TRAINER), initial, hf_config, config.model.tiny.seed)
    return Checkpoint.open(initial)


async def train(config: GRPOConfig, run_dir: Path, procs: RunProcs) -> dict:
    """Checkpoint, tokenizer and task; then the run's handles, the loop, and the tidy-up."""
    checkpoint = await prepare_checkpoint(config, run_dir, procs)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    context = config.generator.max_model_len or checkpoint.shape.max_seq_len
    room = context - config.sampling.max_tokens  # for a prompt
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    async with open_environments(config.env, tokenizer, config.episodes_in_flight, run_dir, context) as new_environment:
        task = with_environment(build_task(config.task, tokenizer, room), new_environment, tokenizer)
        eval_prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room) if config.eval.enabled else []
        print(f"{since_launch()} model {checkpoint.path} | task {task.name} | mode {config.mode}", flush=True)
        async with run_meshes(procs, checkpoint, pad_id, run_dir) as handles:
            env_runner = await start_environments(config, handles, task, tokenizer, context)
            return await train_on(config, run_dir, handles, task, env_runner, eval_prompts)


@asynccontextmanager
async def run_meshes(procs: RunProcs, checkpoint: Checkpoint, pad_id: int, run_dir: Path) -> AsyncIterator[RunHandles]:
    """`spawn_run`'s handles, said when they are up; after the block, the plots drawn while the
    procs stop."""
    plots = None
    try:
        async with spawn_run(procs, checkpoint, pad_id, run_dir) as handles:
            starts = ", ".join(f"{s:.1f}s" for s in handles.engine_start_s)
            print(f"{since_launch()} meshes up (engine start {starts}); procs: {handles.procs_file.path}", flush=True)
            try:
                yield handles
            finally:
                plots = asyncio.create_task(asyncio.to_thread(draw_plots_if_any, run_dir))
    finally:
        if plots is not None:
            await plots


async def start_environments(config: GRPOConfig, handles: RunHandles, task: Task, tokenizer, context: int):
    """The runner of the task's multi-turn episodes (None: single-turn), its environments on
    env.procs procs of their own, or in the controller."""
    new_environment = environment_factory(task)
    if new_environment is None:
        return None
    session_limit = getattr(new_environment, "session_limit", None)  # kept here, wherever environments run
    if config.env.procs:
        new_environment = await handles.environments.start(new_environment)
    return build_env_runner(config.env, new_environment, tokenizer, config.sampling, context, session_limit)


async def train_on(
    config: GRPOConfig, run_dir: Path, handles: RunHandles, task: Task, env_runner: EnvRunner | None, eval_prompts
) -> dict:
    """The loop's collaborators, the loop, then the final policy, the timeline and the summary."""
    resume_from = CheckpointDirectory(run_dir, config.checkpoint.keep).latest_valid() if config.resume else None
    resumed_at = None if resume_from is None else step_of(resume_from)
    sinks = build_sinks(config.logging, run_dir, asdict(config), resumed_at)
    metrics = MetricsLog(run_dir, config.steps, config.target_reward, sinks, resume_after_step=resumed_at)
    admission = AdmissionControl(config.batch_size, config.max_policy_age, config.admission_control)
    route = plan_route(config, handles.generators, handles.relays)
    delivery = WeightDelivery(handles.generators, route, on_loaded=admission.weights_moved)
    scoring = build_tier(config.scorers, config.scoring, task, handles.scorers, config.loss.scale_by_std)
    rollouts = build_rollouts(config, task, scoring, env_runner)
    record = RunRecord()
    evaluations = None
    if config.eval.enabled:
        evaluator = build_evaluator(
            config.eval, eval_prompts, config.scorers, config.scoring, task, config.sampling, env_runner
        )
        evaluations = EvaluationSchedule(
            evaluator, config.eval.every_steps, handles.generators, delivery, record, metrics
        )
    checkpointer = Checkpointer(run_dir, config.checkpoint.keep) if config.checkpoint.enabled else None
    loop = GRPOLoop(config, handles, rollouts, admission, delivery, metrics, record, checkpointer, evaluations)

    async def summarise(final_model: str | None) -> dict:
        return await write_summary(
            run_dir, config, record, handles, admission.paused_s, task.skipped_rows, final_model,
            delivery.receivers_report(),
        )

    return await run_to_the_end(loop, resume_from, handles, run_dir, config.trace.enabled, summarise)


async def run_to_the_end(
    loop: TrainingLoop,
    resume_from: Path | None,
    handles: RunHandles,
    run_dir: Path,
    trace: bool,
    summarise: Callable[[str | None], Awaitable[dict]],
) -> dict:
    """`loop` run (Ctrl-C asks it to stop; a second, until the summary is written, exits at once),
    then the final policy (unless the trainer was abandoned mid-step), the timeline and the
    summary (`summarise(final_model)`); a trainer failure is summarised, then raised. A full disk
    met on the way is the run's failure (process/disk_full.py)."""
    with stop_on_signals(loop.request_stop, loop.stop_grace_s):
        try:
            await loop.run(resume_from)
        except TrainerFailed as err:
            loop.record.failure = str(err)
            await summarise(None)
            raise
        final_model = None
        if loop.trainer_mid_step:
            loop.note_cut_short("no final policy saved: the trainer was still in its step")
        else:
            final_model = await save_final_policy(handles, run_dir)
        if trace:
            await write_trace(handles, run_dir)
        loop.record.failure = loop.record.failure or disk_full.first()
        return await summarise(final_model)


def build_rollouts(config: GRPOConfig, task: Task, scoring, env_runner: EnvRunner | None) -> Rollouts:
    """Single-turn rollouts, or multi-turn episodes played by `env_runner`."""
    common = (task, scoring, config.sampling, config.group_size, config.prompts_per_rollout, config.seed)
    watch = ProgressWatch(config.stall)
    if env_runner is not None:
        return EpisodeRollouts(env_runner, *common, watch=watch)
    return Rollouts(*common, partial_calls=config.filter.zero_variance_groups, watch=watch)


async def save_final_policy(handles: RunHandles, run_dir: Path) -> str | None:
    """RUN_DIR/final_model (and final_adapter with LoRA); None if it could not be written (then
    nothing half-written is left there)."""
    print("saving the final policy ...", flush=True)
    started = asyncio.get_running_loop().time()
    final = run_dir / "final_model"
    saved = await handles.trainer.save_hf(str(final), str(run_dir / "final_adapter"))
    if "error" in saved:
        shutil.rmtree(final, ignore_errors=True)
        report_side_output_failure(final, saved["error"])
        return None
    print(f"final policy saved in {asyncio.get_running_loop().time() - started:.1f}s: {saved['path']}", flush=True)
    return saved["path"]


async def write_trace(handles: RunHandles, run_dir: Path) -> None:
    """RUN_DIR/trace.json: every actor's spans as Chrome trace events (one track per actor)."""
    tracks = await handles.trace_spans()
    replace_text(run_dir / "trace.json", json.dumps(trace_events(tracks)))


def draw_plots_if_any(run_dir: Path) -> Path | None:
    """RUN_DIR/plots.png, for a run that trained at least one step (none where it could not be
    written whole)."""
    from forge_async.observability.plot import PlotError, draw_plots  # matplotlib is slow to import: only at the end

    path = run_dir / "plots.png"
    try:
        drawn = write_side_output(path, lambda: draw_plots(run_dir))
    except PlotError:
        return None
    if drawn is None:
        path.unlink(missing_ok=True)
    return drawn
