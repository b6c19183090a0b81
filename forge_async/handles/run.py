"""Every role's handle of one run, and what is asked of all of them together."""

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from forge_async.handles.buffer import BufferHandle
from forge_async.handles.environments import EnvironmentHosts
from forge_async.handles.generators import GeneratorPool
from forge_async.handles.generators.snapshot import Snapshot
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.relays import WeightRelays
from forge_async.handles.rival import Rival
from forge_async.handles.scorers import ScorerModelHandle
from forge_async.mesh.supervision import STOP_TIMEOUT_S, T, within
from forge_async.handles.trainer import TrainerHandle
from forge_async.mesh.run_plan import RunPlan
from forge_async.observability.spans import TRACER, Span
from forge_async.weights.route import WeightRoute, plan_route


@dataclass
class RunHandles:
    trainer: TrainerHandle
    generators: GeneratorPool
    buffer: BufferHandle | None  # None: the run has no replay buffer (apps.sft)
    scorers: dict[int, ScorerModelHandle]  # by position in the `scorers` list
    relays: WeightRelays
    environments: EnvironmentHosts
    procs_file: ProcsFile
    plan: RunPlan  # what was brought up, and where
    uses_torchstore: bool
    engine_start_s: list[float]  # each generator's engine start-up
    snapshot: Snapshot | None = None  # a `snapshot` seat's generators (env.seats)
    rival: Rival | None = None  # a `rival` seat's policy: trainer, generators, buffer (env.seats)

    def weight_route(self) -> WeightRoute:
        """How each published version reaches each of the trained policy's generators."""
        return plan_route(self.plan.weights, self.plan.layout(), self.generators, self.relays)

    async def trace_spans(self) -> dict[str, list[Span]]:
        """Every actor's spans since the last call, by track; a proc that cannot answer is left out."""
        tracks = {"controller": TRACER.take()}
        # each answers a track per rank
        trainers: dict[str, Awaitable[dict[str, list[Span]]]] = {"trainer": self.trainer.trace_spans()}
        calls: dict[str, Awaitable[list[Span]]] = {}
        if self.buffer is not None:
            calls["replay buffer"] = self.buffer.trace_spans()
        calls.update(await self.generators.trace_spans())
        calls.update({f"scorer {s.label}": s.trace_spans() for s in self.scorers.values()})
        calls.update(await self.environments.trace_spans())
        if self.snapshot is not None:
            calls.update(await self.snapshot.pool.trace_spans())
        if self.rival is not None:
            trainers["rival trainer"] = self.rival.trainer.trace_spans()
            calls.update(await self.rival.pool.trace_spans())
        for by_rank in trainers.values():
            if (rank_tracks := await _answered(by_rank)) is not None:
                tracks.update(rank_tracks)
        for track, call in calls.items():
            if (spans := await _answered(call)) is not None:
                tracks[track] = spans
        return tracks

    @property
    def placement(self) -> dict[str, list[int]]:
        """Where each mesh runs, as its actors report it: node ranks."""
        placement = {
            "trainer": sorted({rank.node for rank in self.trainer.where}),
            "generators": self.generators.nodes(),
        }
        if self.snapshot is not None:
            placement["snapshot_generators"] = self.snapshot.pool.nodes()
        if self.rival is not None:
            placement["rival_trainer"] = sorted({rank.node for rank in self.rival.trainer.where})
            placement["rival_generators"] = self.rival.pool.nodes()
        return placement

    async def stop(self) -> None:
        """Stop every proc that can still be reached, all at once, then the store."""
        await asyncio.gather(
            self.relays.stop(),
            self.trainer.stop(),
            self.generators.stop(),
            *([] if self.buffer is None else [self.buffer.stop()]),
            *(s.stop() for s in self.scorers.values()),
            self.environments.stop(),
            *([] if self.snapshot is None else [self.snapshot.stop()]),
            *([] if self.rival is None else [self.rival.stop()]),
        )
        if self.uses_torchstore:
            from forge_async.weights import store  # heavy to import: only where torchstore is used

            await store.stop_store()


async def _answered(call: Awaitable[T]) -> T | None:
    """`call`'s answer, or None if it fails or does not come within STOP_TIMEOUT_S."""
    try:
        return await within(call, STOP_TIMEOUT_S)
    except Exception:
        return None
