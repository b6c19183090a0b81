"""The GRPO app's training half: what needs torch, TorchTitan and the actor modules.

apps/grpo/main.py imports this only after the run's procs are spawned, so that
these imports (~5 s) overlap the procs' own start-up.
"""

import asyncio
from pathlib import Path

from transformers import AutoTokenizer

from forge_async.checkpoint.checkpointer import Checkpointer
from forge_async.checkpoint.directory import CheckpointDirectory
from forge_async.config import GRPOConfig
from forge_async.console import since_launch
from forge_async.data.tasks import build_task
from forge_async.envs.runner import build_env_runner, environment_factory, with_environment
from forge_async.errors import TrainerFailed
from forge_async.evaluation.evaluator import build_evaluator, held_out_prompts
from forge_async.interrupt import stop_on_signals
from forge_async.launch.procs import RunProcs
from forge_async.launch.supervision import RunMeshes
from forge_async.loop import GRPOLoop
from forge_async.launch.meshes import write_tiny_weights_on
from forge_async.models.checkpoint import WEIGHTS_FILE, Checkpoint
from forge_async.models.tiny import write_tiny_config
from forge_async.weights.shared_memory import SharedMemoryChannel


async def prepare_checkpoint(config: GRPOConfig, run_dir: Path, procs: RunProcs) -> Checkpoint:
    """The initial policy: model.path, or the tiny model written into the run dir, its weights
    by a trainer proc (TorchTitan is loaded there, not here: models/tiny.py)."""
    if config.model.path is not None:
        return Checkpoint.open(config.model.path)
    initial = run_dir / "initial_model"
    if not (initial / WEIGHTS_FILE).is_file():  # a resumed run already has it
        hf_config = write_tiny_config(initial, config.model.tiny)
        await write_tiny_weights_on(procs.early("trainer"), initial, hf_config, config.model.tiny.seed)
    return Checkpoint.open(initial)


async def train(config: GRPOConfig, run_dir: Path, procs: RunProcs) -> dict:
    """Checkpoint, tokenizer and task; then the actors on `procs`, the loop, and the tidy-up."""
    checkpoint = await prepare_checkpoint(config, run_dir, procs)
    resume_from = CheckpointDirectory(run_dir, config.checkpoint.keep).latest_valid() if config.resume else None
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    context = config.generator.max_model_len or checkpoint.shape.max_seq_len
    room = context - config.sampling.max_tokens  # for a prompt
    task = with_environment(config.env, build_task(config.task, tokenizer, room))
    eval_prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room) if config.eval.enabled else []
    new_environment = environment_factory(task)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    print(f"{since_launch()} model {checkpoint.path} | task {task.name} | mode {config.mode}", flush=True)

    checkpointer = Checkpointer(run_dir, config.checkpoint.keep) if config.checkpoint.enabled else None
    meshes = RunMeshes(run_dir, checkpoint, pad_id, procs)
    try:
        starts = await meshes.start()
        print(
            f"{since_launch()} meshes up (engine start {', '.join(f'{s:.1f}s' for s in starts)}); "
            f"procs: {run_dir / 'procs.json'}",
            flush=True,
        )
        env_runner = None
        if new_environment is not None:
            if config.env.procs:
                new_environment = await meshes.spawn_environments(new_environment)
            env_runner = build_env_runner(config.env, new_environment, tokenizer, config.sampling, context)
        evaluator = None
        if config.eval.enabled:
            evaluator = build_evaluator(
                config.eval, eval_prompts, config.scorers, config.scoring, task, config.sampling, env_runner
            )
        loop = GRPOLoop(config, run_dir, task, meshes, checkpointer, env_runner, evaluator)
        with stop_on_signals(loop.request_stop):
            try:
                return await loop.run(resume_from)
            except TrainerFailed as err:
                await loop.write_summary(None, str(err))
                raise
    finally:
        plots = asyncio.create_task(asyncio.to_thread(draw_plots_if_any, run_dir))
        await meshes.stop()
        SharedMemoryChannel(config.weights.channel_dir).remove()
        await plots


def draw_plots_if_any(run_dir: Path) -> Path | None:
    """RUN_DIR/plots.png, for a run that trained at least one step."""
    from forge_async.plot import PlotError, draw_plots  # matplotlib: 1-2 s to import

    try:
        return draw_plots(run_dir)
    except PlotError:
        return None
