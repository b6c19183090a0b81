"""Every role's handle of one run, and what is asked of all of them together."""

import asyncio
from dataclasses import dataclass

from forge_async.handles.buffer import BufferHandle
from forge_async.handles.environments import EnvironmentHosts
from forge_async.handles.generators import GeneratorPool
from forge_async.handles.generators.snapshot import Snapshot
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.relays import WeightRelays
from forge_async.handles.rival import Rival
from forge_async.handles.scorers import ScorerModelHandle
from forge_async.mesh.supervision import STOP_TIMEOUT_S, within
from forge_async.handles.trainer import TrainerHandle
from forge_async.observability.spans import TRACER


@dataclass
class RunHandles:
    trainer: TrainerHandle
    generators: GeneratorPool
    buffer: BufferHandle | None  # None: the run has no replay buffer (apps.sft)
    scorers: dict[int, ScorerModelHandle]  # by position in the `scorers` list
    relays: WeightRelays
    environments: EnvironmentHosts
    procs_file: ProcsFile
    uses_torchstore: bool
    engine_start_s: list[float]  # each generator's engine start-up
    snapshot: Snapshot | None = None  # a `snapshot` seat's generators (env.seats)
    rival: Rival | None = None  # a `rival` seat's policy: trainer, generators, buffer (env.seats)

    async def trace_spans(self) -> dict[str, list]:
        """Every actor's spans since the last call, by track; a proc that cannot answer is left out."""
        tracks = {"controller": TRACER.take()}
        calls = {"trainer": self.trainer.trace_spans()}
        if self.buffer is not None:
            calls["replay buffer"] = self.buffer.trace_spans()
        calls.update(await self.generators.trace_spans())
        calls.update({f"scorer {s.label}": s.trace_spans() for s in self.scorers.values()})
        calls.update(await self.environments.trace_spans())
        for track, call in calls.items():
            try:
                spans = await within(call, STOP_TIMEOUT_S)
            except Exception:
                continue
            if track == "trainer":
                tracks.update(spans)
            else:
                tracks[track] = spans
        return tracks

    @property
    def placement(self) -> dict:
        """Where each mesh runs, as its actors report it: node ranks."""
        return {
            "trainer": sorted({rank.node for rank in self.trainer.where}),
            "generators": self.generators.nodes(),
        }

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
