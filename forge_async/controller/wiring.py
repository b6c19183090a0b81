"""What every app's run is composed of, past its procs' start (controller/startup.py): the
initial policy, the run's handles (handles/spawn_run.py), the loop run to its end, then the
final policy, the timeline and the summary, and the plots drawn while the procs stop.

controller/grpo_run.py and controller/sft_run.py compose a run from these; they are imported
only after the run's procs are spawned, so that these imports (torch, transformers, the actor
modules) overlap the procs' own start-up.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from forge_async.controller.config import RunConfig
from forge_async.controller.interrupt import stop_on_signals
from forge_async.controller.loop import TrainingLoop
from forge_async.errors import TrainerFailed
from forge_async.handles.meshes import write_tiny_weights_on
from forge_async.handles.run import RunHandles
from forge_async.handles.spawn_run import spawn_run
from forge_async.handles.trainer import save_policy
from forge_async.mesh.procs import RunProcs
from forge_async.mesh.roles import TRAINER
from forge_async.models.hf_checkpoint import WEIGHTS_FILE, Checkpoint
from forge_async.models.tiny import write_tiny_config
from forge_async.observability.console import since_launch
from forge_async.observability.outputs import replace_text, write_side_output
from forge_async.observability.span_names import MESHES_START, START_UP_LANE
from forge_async.observability.spans import TRACER, trace_events
from forge_async.process import disk_full


async def prepare_checkpoint(config: RunConfig, run_dir: Path, procs: RunProcs) -> Checkpoint:
    """The initial policy: model.path, or the tiny model written into the run dir, its weights
    by a trainer proc (TorchTitan is loaded there, not here: models/tiny.py)."""
    if config.model.path is not None:
        return Checkpoint.open(config.model.path)
    initial = run_dir / "initial_model"
    if not (initial / WEIGHTS_FILE).is_file():  # a resumed run already has it
        hf_config = write_tiny_config(initial, config.model.tiny)
        await write_tiny_weights_on(procs.early(TRAINER), initial, hf_config, config.model.tiny.seed)
    return Checkpoint.open(initial)


@asynccontextmanager
async def run_meshes(procs: RunProcs, checkpoint: Checkpoint, pad_id: int, run_dir: Path) -> AsyncIterator[RunHandles]:
    """`spawn_run`'s handles, said when they are up; after the block, the plots drawn while the
    procs stop."""
    plots = None
    since = time.time_ns()
    try:
        async with spawn_run(procs, checkpoint, pad_id, run_dir) as handles:
            TRACER.add(MESHES_START, since, time.time_ns(), START_UP_LANE)
            starts = ", ".join(f"{s:.1f}s" for s in handles.engine_start_s)
            print(f"{since_launch()} meshes up (engine start {starts}); procs: {handles.procs_file.path}", flush=True)
            try:
                yield handles
            finally:
                plots = asyncio.create_task(asyncio.to_thread(draw_plots_if_any, run_dir))
    finally:
        if plots is not None:
            await plots


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
            if handles.rival is not None:
                await handles.rival.save_final(run_dir / "rival_final_model")
        if trace:
            await write_trace(handles, run_dir)
        loop.record.failure = loop.record.failure or disk_full.first()
        return await summarise(final_model)


async def save_final_policy(handles: RunHandles, run_dir: Path) -> str | None:
    """RUN_DIR/final_model (and final_adapter with LoRA); None if it could not be written (then
    nothing half-written is left there)."""
    return await save_policy(handles.trainer, run_dir / "final_model", run_dir / "final_adapter", "final policy")


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
