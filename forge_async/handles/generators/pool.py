"""A run's generators: spawned together, the live ones chosen from, stopped together.

The controller's one view of them: the rollout workers route calls over `live` ones
(`by_finish_time`, `stand_in`), weight delivery asks each by index (`version`,
`hold_weights`, `load_version`), a node that comes back has its generators spawned
again (`take_back`), and the run's figures read their paces, restarts and engine-batch occupancy.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable

from forge_async.data.episode import Completion
from forge_async.generation.config import SamplingConfig
from forge_async.generation.occupancy import Occupancy
from forge_async.generation.stats import GeneratorStats
from forge_async.handles.generators.failures import GeneratorLost
from forge_async.handles.generators.generator import GeneratorHandle
from forge_async.handles.generators.lives import GeneratorLives
from forge_async.handles.generators.pace import by_finish_time
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.supervision import T, within
from forge_async.observability.run_summary import TakenBack
from forge_async.observability.spans import Span
from forge_async.weights.outcomes import Loaded, ReceiverLost

_POLL_S = 0.002  # how often `until_all_hold` asks the generators their version
OCCUPANCY_WAIT_S = 2.0  # the longest `occupancy_totals` waits for a generator's answer


class GeneratorPool:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, count: int, max_restarts: int, first: int = 0):
        """`first`: the first generator's proc index (a snapshot's pool comes after the trained policy's)."""
        self.count = count
        self.lives = GeneratorLives(count, max_restarts)
        self._generators = [GeneratorHandle(spawner, procs_file, i, self.lives, first + i) for i in range(count)]
        self.taken_back: list[TakenBack] = []  # generators spawned again on a node that came back

    def __getitem__(self, index: int) -> GeneratorHandle:
        return self._generators[index]

    async def start(self) -> list[float]:
        """Every generator spawned at once; returns their engines' start times."""
        await asyncio.gather(*(g.start() for g in self._generators))
        return [g.engine_start_s for g in self._generators]

    async def stop(self) -> None:
        """Stop every generator that can be reached; one that left a question unanswered (hung, or
        failed but not yet gone) is killed first where it runs on the controller's host."""
        for generator in self._generators:
            generator.kill_if_hung_here()
        await asyncio.gather(*(g.stop() for g in self._generators))

    # Which live, and which takes a call

    def live(self) -> list[int]:
        """The generators not lost."""
        return self.lives.live()

    def stand_in(self, index: int) -> int:
        """Generator `index` while it lives, else the live one that takes its work."""
        return self.lives.stand_in(index)

    def by_finish_time(self, size: int) -> list[int]:
        """The live generators, soonest first to finish `size` more samples at the pace each kept (pace.py)."""
        return by_finish_time({i: self._generators[i].pace for i in self.lives.live_or_fail()}, size)

    async def on_live(self, index: int, work: Callable[[GeneratorHandle], Awaitable[T]]) -> T:
        """`work(generator index)`; if it is lost meanwhile, `work` again on its stand-in."""
        while True:
            try:
                return await work(self._generators[index])
            except GeneratorLost:
                index = self.stand_in(index)

    async def generate_soonest(
        self, prompts: list[list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]:
        """`generate` on the live generator soonest to finish it (a pool that plays seats' turns:
        a snapshot's, a rival's), or on its stand-in if it is lost meanwhile."""
        index = self.by_finish_time(len(prompts) * n)[0]
        return await self.on_live(index, lambda generator: generator.generate(prompts, sampling, n))

    def lose(self, index: int, why: str) -> None:
        """Generator `index` is lost (`why`): no more calls go to it; GeneratorFailed if it was the last."""
        self._generators[index].lose(why)

    # Nodes

    def node_of(self, index: int) -> int:
        """The node generator `index` is placed on."""
        return self._generators[index].node()

    def on_node(self, node: int) -> list[int]:
        """The generators placed on node `node`."""
        return [i for i in range(self.count) if self.node_of(i) == node]

    def nodes(self) -> list[int]:
        """The node each generator runs on, as procs.json has it."""
        return [g.procs_file.one(g.role).node for g in self._generators]

    async def take_back(self, index: int) -> None:
        """Generator `index`, lost with its node, spawned again there (the node came back): calls go to it again."""
        generator = self._generators[index]
        await generator.start()
        await generator.replaced()
        self.lives.taken_back(index)
        proc = generator.located()
        self.taken_back.append(TakenBack(generator=index, proc=proc, samples_before=generator.pace.returned))

    # Asked by index (weight delivery, checkpoints)

    async def version(self, index: int) -> int:
        return await self._generators[index].version()

    async def live_versions(self) -> list[int]:
        """The version each generator not lost samples with now."""
        versions = []
        for index in self.live():
            try:
                versions.append(await self._generators[index].version())
            except GeneratorLost:
                pass
        return versions

    async def until_all_hold(self, version: int, within_s: float | None = None) -> bool:
        """Wait until every generator not lost samples with `version` or a later one (sync mode:
        they swap to it between engine steps); False if `within_s` seconds pass first."""
        deadline = None if within_s is None else time.monotonic() + within_s
        while min(await self.live_versions(), default=version) < version:
            if deadline is not None and time.monotonic() > deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    async def hold_weights(self, index: int, hold: bool) -> int:
        return await self._generators[index].hold_weights(hold)

    async def load_version(self, index: int, version: int) -> Loaded | ReceiverLost:
        return await self._generators[index].load_version(version)

    async def set_rng_state(self, index: int, state) -> None:
        await self._generators[index].set_rng_state(state)

    # Each one's state (None from one lost, failed or hung)

    async def stats(self) -> list[GeneratorStats | None]:
        return [await g.answer(lambda actor: actor.stats.call_one()) for g in self._generators]

    async def occupancy_totals(self) -> dict[int, Occupancy | None]:
        """Each live generator's engine-batch occupancy so far (generation/occupancy.py), read once
        a training step. None from one that has no actor yet, or does not answer within
        OCCUPANCY_WAIT_S (busy in a long engine step or a weight swap, or failed): a figure, left
        out of this read only, and no failure of its own (the calls that matter meet it)."""
        live = self.live()
        answers = await asyncio.gather(*(_occupancy_totals(self._generators[index]) for index in live))
        return dict(zip(live, answers))

    async def rng_states(self) -> list:
        return [await g.answer(lambda actor: actor.rng_state.call_one()) for g in self._generators]

    async def trace_spans(self) -> dict[str, Awaitable[list[Span]]]:
        """Each generator's pending spans call, by track (the caller bounds the wait)."""
        answering = [self._generators[i] for i in self.live() if not self._generators[i].unanswering]
        return {f"generator {g.proc_index}": g.actor.trace_spans.call_one() for g in answering}

    # The run's figures

    @property
    def restarts(self) -> int:
        return self.lives.restarts

    @property
    def lost_requests(self) -> int:
        return self.lives.lost_requests

    @property
    def lost(self) -> dict[int, str]:
        return self.lives.lost

    @property
    def losses(self) -> list[str]:
        return self.lives.losses

    @property
    def on_replaced(self) -> Callable[[int, object], Awaitable[None]] | None:
        return self.lives.on_replaced

    @on_replaced.setter
    def on_replaced(self, hook: Callable[[int, object], Awaitable[None]] | None) -> None:
        self.lives.on_replaced = hook

    @property
    def returned(self) -> list[int]:
        """Samples each generator returned, over the run."""
        return [g.pace.returned for g in self._generators]

    def busy_s(self) -> float:
        """Seconds the generators spent with a generate call in flight, summed over them."""
        return sum(g.pace.busy.busy_s for g in self._generators)


async def _occupancy_totals(generator: GeneratorHandle) -> Occupancy | None:
    """A generator's occupancy totals, or None if it has no actor or does not answer in time."""
    if not generator.started:
        return None
    try:
        return await within(generator.actor.occupancy_totals.call_one(), OCCUPANCY_WAIT_S)
    except Exception:  # a figure: the next read covers what this one missed
        return None
