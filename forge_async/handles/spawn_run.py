"""spawn_run: every role of a run brought up on its procs, as the config and placement say."""

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from monarch.actor import ActorError

from forge_async.errors import UserError
from forge_async.handles.buffer import BufferHandle
from forge_async.handles.environments import EnvironmentHosts
from forge_async.handles.generators import GeneratorPool
from forge_async.handles.generators.snapshot import Snapshot
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.relays import WeightRelays
from forge_async.handles.rival import Rival
from forge_async.handles.run import RunHandles
from forge_async.handles.scorers import ScorerModelHandle
from forge_async.handles.trainer import TrainerHandle
from forge_async.mesh.procs import RunProcs
from forge_async.handles.spawner import RoleSpawner
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.weights.route import relay_nodes, uses_torchstore


@asynccontextmanager
async def spawn_run(procs: RunProcs, checkpoint: Checkpoint, pad_id: int, run_dir: Path) -> AsyncIterator[RunHandles]:
    """Trainer, generators, weight relays, and the replay buffer and model scorers the run has
    (`procs.plan`), spawned all at once, and the store started if weights travel through it;
    procs.json says where each runs. Everything is stopped when the block ends, however it ends.

    Bad input a proc finds as it starts (a GPU its node lacks) is raised as the UserError
    it is: one line, not a remote traceback. Environment hosts start later, from the task
    (`handles.environments.start`)."""
    plan = procs.plan
    spawner = RoleSpawner(procs, checkpoint, pad_id)
    procs_file = ProcsFile(run_dir, procs.hosts)
    handles = RunHandles(
        trainer=TrainerHandle(spawner, procs_file),
        generators=GeneratorPool(spawner, procs_file, plan.generator.count, plan.generator.max_restarts),
        buffer=BufferHandle(spawner, procs_file) if plan.replay_buffer is not None else None,
        scorers={i: ScorerModelHandle(spawner, procs_file, i) for i in plan.model_scorers},
        relays=WeightRelays(spawner, procs_file, relay_nodes(plan.weights, plan.layout())),
        environments=EnvironmentHosts(spawner, procs_file, plan.environment_procs),
        procs_file=procs_file,
        plan=plan,
        uses_torchstore=uses_torchstore(plan.weights, plan.layout()),
        engine_start_s=[],
        snapshot=Snapshot.of_run(plan.snapshot, spawner, procs_file),
        rival=Rival.of_run(plan.rival, spawner, procs_file, run_dir),
    )
    try:
        handles.engine_start_s = await _start(handles)
        yield handles
    finally:
        await handles.stop()


async def _start(handles: RunHandles) -> list[float]:
    """Every role started at once; returns each generator's engine start time."""
    try:
        engine_start_s, _ = await asyncio.gather(
            handles.generators.start(),
            asyncio.gather(
                handles.trainer.start(),
                _start_if_any(handles.buffer),
                handles.relays.start(),
                _start_in_turn(handles.scorers.values()),
                _start_store(handles.uses_torchstore),
                _start_if_any(handles.snapshot),
                _start_if_any(handles.rival),
            ),
        )
    except ActorError as err:
        if isinstance(err.exception, UserError):
            raise err.exception from None
        raise
    return engine_start_s


async def _start_if_any(role: BufferHandle | Snapshot | Rival | None) -> None:
    if role is not None:
        await role.start()


async def _start_in_turn(scorers: Iterable[ScorerModelHandle]) -> None:
    for scorer in scorers:
        await scorer.start()


async def _start_store(needed: bool) -> None:
    if needed:
        from forge_async.weights import store  # heavy to import: only where torchstore is used

        await store.start_store()
