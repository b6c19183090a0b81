"""Supervised fine-tuning's run (apps.sft), composed as GRPO's is (controller/grpo_run.py): the
initial policy, the task and its demonstrations, the run's handles (the trainer, the
generator(s) evaluations run on), the loop (controller/sft_loop.py), then the final policy,
the timeline and summary.json.

`config` is an SFT run's (apps/sft/config.py): RunConfig's sections, `steps`, `prompts_per_step`
and the sft `loss`. cli/app.py imports this module only after the run's procs are spawned.
"""

from dataclasses import asdict
from pathlib import Path


from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import CheckpointDirectory, step_of
from forge_async.controller.config import AppKeys, RunConfig
from forge_async.observability.record import RunRecord
from forge_async.controller.sft_loop import SFTLoop, SFTMetricsLog
from forge_async.controller.sft_summary import write_summary
from forge_async.models.tokenizer import load_tokenizer
from forge_async.controller.wiring import prepare_checkpoint, run_meshes, run_to_the_end
from forge_async.tasks.demonstrations import Demonstrations
from forge_async.evaluation.evaluator import build_evaluator, held_out_prompts
from forge_async.evaluation.schedule import EvaluationSchedule
from forge_async.handles.run import RunHandles
from forge_async.mesh.procs import RunProcs
from forge_async.observability.console import since_launch
from forge_async.observability.sinks import build_sinks
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import Task
from forge_async.weights.delivery import WeightDelivery


async def train(config: RunConfig, run_dir: Path, procs: RunProcs) -> dict:
    """Checkpoint, tokenizer, task and demonstrations; then the run's handles, the loop, the tidy-up."""
    checkpoint = await prepare_checkpoint(config, run_dir, procs)
    tokenizer = load_tokenizer(checkpoint.path, tiny=config.model.path is None)
    context = config.generator.max_model_len or checkpoint.shape.max_seq_len
    room = context - config.sampling.max_tokens  # for a prompt: a demonstration may take max_tokens
    task = build_task(config.task, tokenizer, room)
    eval_prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room) if config.eval.enabled else []
    demonstrations = Demonstrations(task, tokenizer, config.sampling.max_tokens, config.seed, config.task.skip_bad_rows)
    demonstrations.check()  # a task with nothing to imitate fails here, before the meshes come up
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    print(f"{since_launch()} model {checkpoint.path} | task {task.name} | supervised fine-tuning", flush=True)

    async with run_meshes(procs, checkpoint, pad_id, run_dir) as handles:
        return await train_on(config, run_dir, handles, task, demonstrations, eval_prompts)


async def train_on(
    config: RunConfig,
    run_dir: Path,
    handles: RunHandles,
    task: Task,
    demonstrations: Demonstrations,
    eval_prompts,
) -> dict:
    """The loop's collaborators, the loop, then the final policy, the timeline and the summary."""
    if not isinstance(config, AppKeys):
        raise TypeError(f"{type(config).__name__} is not an SFT run's config: it has no steps or prompts_per_step")
    resume_from = CheckpointDirectory(run_dir, config.checkpoint.keep).latest_valid() if config.resume else None
    resumed_at = None if resume_from is None else step_of(resume_from)
    sinks = build_sinks(config.logging, run_dir, asdict(config), resumed_at)
    metrics = SFTMetricsLog(run_dir, config.steps, sinks, resume_after_step=resumed_at)
    delivery = WeightDelivery(handles.generators, handles.weight_route())
    record = RunRecord()
    evaluations = None
    if config.eval.enabled:
        evaluator = build_evaluator(  # the task's reward scores evaluations
            config.eval, eval_prompts, [ScorerConfig(kind="reward")], ScoringConfig(), task, config.sampling, None
        )
        evaluations = EvaluationSchedule(
            evaluator, config.eval.every_steps, handles.generators, delivery, record, metrics
        )
    checkpointer = Checkpointer(run_dir, config.checkpoint.keep) if config.checkpoint.enabled else None
    loop = SFTLoop(
        config.steps,
        config.prompts_per_step,
        config.checkpoint,
        handles,
        demonstrations,
        delivery,
        metrics,
        record,
        checkpointer,
        evaluations,
    )

    async def summarise(final_model: str | None) -> dict:
        return write_summary(run_dir, config, loop, handles, task.skipped_rows, final_model)

    return await run_to_the_end(loop, resume_from, handles, run_dir, config.trace.enabled, summarise)
