"""GRPO's run (apps.grpo, apps.distill), composed: the initial policy, tokenizer and task; the
run's handles; the loop's collaborators, the loop, then the final policy, the timeline and
summary.json (controller/wiring.py: what every app's run shares).

`train` tells the whole story. cli/app.py imports this module only after the run's procs are
spawned, so that its imports (torch, transformers) overlap the procs' start-up.
"""

import time
from dataclasses import asdict
from pathlib import Path


from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import CheckpointDirectory, step_of
from forge_async.controller.config import GRPOConfig
from forge_async.controller.grpo_loop import GRPOLoop
from forge_async.controller.rival_loop import RivalLoop
from forge_async.rollout.progress_watch import ProgressWatch
from forge_async.observability.record import RunRecord
from forge_async.controller.summary import write_summary
from forge_async.models.tokenizer import load_tokenizer
from forge_async.controller.wiring import prepare_checkpoint, run_meshes, run_to_the_end
from forge_async.envs.registry import open_environments
from forge_async.envs.runner import EnvRunner, build_env_runner, environment_factory, with_environment
from forge_async.envs.seats import RIVAL, SeatRunner
from forge_async.evaluation.evaluator import build_evaluator, held_out_prompts
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.run import RunHandles
from forge_async.mesh.procs import RunProcs
from forge_async.observability.console import since_launch
from forge_async.observability.metrics import MetricsLog
from forge_async.observability.sinks import build_sinks
from forge_async.observability.span_names import INITIAL_POLICY, START_UP_LANE, TOKENIZER_AND_TASK
from forge_async.observability.spans import TRACER
from forge_async.rollout.admission import AdmissionControl
from forge_async.rollout.multi_turn import EpisodeRollouts, RivalSeats
from forge_async.rollout.single_turn import Rollouts
from forge_async.scoring.tier import build_tier
from forge_async.envs.registry import build_task
from forge_async.tasks.task import Task
from forge_async.weights.delivery import WeightDelivery


async def train(config: GRPOConfig, run_dir: Path, procs: RunProcs) -> dict:
    """Checkpoint, tokenizer and task; then the run's handles, the loop, and the tidy-up."""
    with TRACER.span(INITIAL_POLICY, START_UP_LANE):
        checkpoint = await prepare_checkpoint(config, run_dir, procs)
    tokenizer_since = time.time_ns()
    tokenizer = load_tokenizer(checkpoint.path, tiny=config.model.path is None)
    context = config.generator.max_model_len or checkpoint.shape.max_seq_len
    room = context - config.sampling.max_tokens  # for a prompt
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    async with open_environments(config.env, tokenizer, config.episodes_in_flight, run_dir, context) as new_environment:
        task = with_environment(build_task(config.task, tokenizer, room), new_environment, tokenizer)
        eval_prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room) if config.eval.enabled else []
        TRACER.add(TOKENIZER_AND_TASK, tokenizer_since, time.time_ns(), START_UP_LANE)
        print(f"{since_launch()} model {checkpoint.path} | task {task.name} | mode {config.mode}", flush=True)
        async with run_meshes(procs, checkpoint, pad_id, run_dir) as handles:
            rival = None if handles.rival is None else RivalLoop(handles.rival, handles.rival.spec)
            env_runner = await start_environments(config, handles, task, tokenizer, context, rival)
            return await train_on(config, run_dir, handles, task, env_runner, eval_prompts, rival)


async def start_environments(
    config: GRPOConfig, handles: RunHandles, task: Task, tokenizer, context: int, rival: RivalLoop | None
):
    """The runner of the task's multi-turn episodes (None: single-turn), its environments on
    env.procs procs of their own, or in the controller; `rival` plays the rival seats."""
    new_environment = environment_factory(task)
    if new_environment is None:
        return None
    session_limit = getattr(new_environment, "session_limit", None)  # kept here, wherever environments run
    if config.env.procs:
        new_environment = await handles.environments.start(new_environment)
    runner = build_env_runner(config.env, new_environment, tokenizer, config.sampling, context, session_limit)
    return SeatRunner(runner, config.env.seats, handles.snapshot, rival) if config.env.seats else runner


async def train_on(
    config: GRPOConfig,
    run_dir: Path,
    handles: RunHandles,
    task: Task,
    env_runner: EnvRunner | SeatRunner | None,
    eval_prompts,
    rival: RivalLoop | None,
) -> dict:
    """The loop's collaborators, the loop, then the final policy, the timeline and the summary."""
    resume_from = CheckpointDirectory(run_dir, config.checkpoint.keep).latest_valid() if config.resume else None
    resumed_at = None if resume_from is None else step_of(resume_from)
    sinks = build_sinks(config.logging, run_dir, asdict(config), resumed_at)
    metrics = MetricsLog(run_dir, config.steps, config.target_reward, sinks, resume_after_step=resumed_at)
    admission = AdmissionControl(config.batch_size, config.max_policy_age, config.admission_control)
    route = handles.weight_route()
    scoring = build_tier(config.scorers, config.scoring, task, handles.scorers, config.loss.scale_by_std)
    followers = [*([handles.snapshot] if handles.snapshot else []), *scoring.self_teachers]
    delivery = WeightDelivery(handles.generators, route, admission.weights_moved, followers)
    rollouts = build_rollouts(config, task, scoring, env_runner, rival)
    record = RunRecord()
    evaluations = None
    if config.eval.enabled:
        evaluator = build_evaluator(
            config.eval,
            eval_prompts,
            config.scorers,
            config.scoring,
            task,
            config.sampling,
            eval_runner(config, env_runner, handles),
        )
        evaluations = EvaluationSchedule(
            evaluator, config.eval.every_steps, handles.generators, delivery, record, metrics
        )
    checkpointer = Checkpointer(run_dir, config.checkpoint.keep) if config.checkpoint.enabled else None
    loop = GRPOLoop(config, handles, rollouts, admission, delivery, metrics, record, checkpointer, evaluations, rival)

    async def summarise(final_model: str | None) -> dict:
        return await write_summary(
            run_dir,
            config,
            record,
            handles,
            admission.paused_s,
            task.skipped_rows,
            final_model,
            delivery.receivers_report(),
            rival,
        )

    return await run_to_the_end(loop, resume_from, handles, run_dir, config.trace.enabled, summarise)


def eval_runner(
    config: GRPOConfig, env_runner: EnvRunner | SeatRunner | None, handles: RunHandles
) -> EnvRunner | SeatRunner | None:
    """What plays evaluations' episodes: the training episodes' runner, or eval.seats' seats in
    env.seats' game (its environments)."""
    if not config.eval.seats:
        return env_runner
    if not isinstance(env_runner, SeatRunner):
        raise RuntimeError(f"eval.seats={list(config.eval.seats)} without env.seats' game to play them in")
    return SeatRunner(env_runner.runner, config.eval.seats, handles.snapshot)


def build_rollouts(
    config: GRPOConfig, task: Task, scoring, env_runner: EnvRunner | SeatRunner | None, rival: RivalLoop | None
) -> Rollouts:
    """Single-turn rollouts, or multi-turn episodes played by `env_runner`, the rival seats'
    episodes going to `rival`."""
    common = (task, scoring, config.sampling, config.group_size, config.prompts_per_rollout, config.seed)
    watch = ProgressWatch(config.stall)
    if env_runner is not None:
        rival_seats = (
            RivalSeats(rival, frozenset(i for i, seat in enumerate(config.env.seats) if seat == RIVAL))
            if rival is not None
            else None
        )
        return EpisodeRollouts(
            env_runner, *common, seat_baseline=config.env.seat_baseline, watch=watch, rival=rival_seats
        )
    return Rollouts(*common, partial_calls=config.filter.zero_variance_groups, watch=watch)
