"""The generators: one proc and one vLLM engine each.

A generator whose proc dies is respawned (a new proc, then the newest weights:
`on_replaced`) and the call it lost is made again on the new one, up to
generator.max_restarts restarts in all; past that the run ends with a
GeneratorFailed naming it (the trainer is fine: the run saves what it learned).

A generator that cannot be respawned (its node no longer answers: the host died) is
*lost*: its calls raise GeneratorLost, and the run goes on with the others (the
rollout workers move to them). Once no generator is left, GeneratorFailed. If its
node comes back, it is spawned there again (`take_back`) and work goes to it as before.
"""

import asyncio
import os
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.handles.procs_file import ProcsFile, located
from forge_async.mesh.located import Where
from forge_async.mesh.supervision import T, is_proc_failure, stop_quietly, supervised, within
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner
from forge_async.observability.metrics import BusyClock
from forge_async.mesh.reply_port import ReplyPort
from forge_async.weights.outcomes import Loaded, ReceiverLost

_RESPAWN_TIMEOUT_S = 40  # a generator that cannot be respawned in this long: its node is gone
ANSWER_TIMEOUT_S = 10  # a question (stats, sampler state) that a generator answers at once, unless hung


class GeneratorFailed(RuntimeError):
    """Generators failed more often than generator.max_restarts allows, or none is left."""


class GeneratorLost(GeneratorFailed):
    """A call to a generator that is lost with its node: make it on another one (`live`)."""


class GeneratorPool:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, count: int, max_restarts: int):
        self.spawner = spawner
        self.procs_file = procs_file
        self.count = count
        self.max_restarts = max_restarts
        self.restarts = 0
        self.lost_requests = 0  # completions whose generate call died with its generator
        # Called with (index, new actor) once a generator is respawned, before its callers retry.
        self.on_replaced: Callable[[int, object], Awaitable[None]] | None = None
        # generator i is busy while a generate call to it is in flight
        self.generating = [BusyClock() for _ in range(count)]
        self.outstanding = [0] * count  # samples asked of generator i and not yet returned
        self.returned = [0] * count  # samples generator i returned, over the run
        self._procs: list = [None] * count
        self._actors: list = [None] * count
        self._restart_locks = [asyncio.Lock() for _ in range(count)]
        self.lost: dict[int, str] = {}  # generator -> why it is lost (its node is gone)
        # generators that left a question unanswered (_ask_each: hung, or failed), until respawned
        self._unanswering: set[int] = set()
        self.losses: list[str] = []  # every loss of the run, the ones taken back too
        self.taken_back: list[dict] = []  # generators spawned again on a node that came back
        self._replies = ReplyPort()  # generate calls, many a step, and loads: answered on one port

    async def start(self) -> list[float]:
        """Every generator spawned at once; returns their engines' start times."""
        return list(await asyncio.gather(*(self._spawn(i) for i in range(self.count))))

    async def _spawn(self, index: int) -> float:
        self._procs[index], self._actors[index], timing = await self.spawner.generator(index)
        self.procs_file.record(roles.generator(index), await self._actors[index].where.call_one())
        return timing["engine_start_s"]

    def node_of(self, index: int) -> int:
        """The node generator `index` is placed on."""
        return self.spawner.config.placement.generator_host(index)

    def on_node(self, node: int) -> list[int]:
        """The generators placed on node `node`."""
        return [i for i in range(self.count) if self.node_of(i) == node]

    async def take_back(self, index: int) -> None:
        """Generator `index`, lost with its node, spawned again there (the node came back): calls go to it again."""
        await self._spawn(index)
        if self.on_replaced is not None:
            await self.on_replaced(index, self._actors[index])
        del self.lost[index]
        where = located(self.procs_file.where[str(roles.generator(index))])
        self.taken_back.append({"generator": index, "proc": where, "samples_before": self.returned[index]})

    def live(self) -> list[int]:
        """The generators not lost."""
        return [i for i in range(self.count) if i not in self.lost]

    def _live_or_fail(self) -> list[int]:
        """The live generators; GeneratorFailed if none is left."""
        live = self.live()
        if not live:
            raise GeneratorFailed(f"no generator is left: {'; '.join(self.lost.values())}")
        return live

    def stand_in(self, index: int) -> int:
        """Generator `index` while it lives, else the live one that takes its work."""
        live = self._live_or_fail()
        return index if index in live else live[index % len(live)]

    def by_finish_time(self, size: int) -> list[int]:
        """The live generators, soonest first to finish `size` more samples: each one's
        samples in flight plus `size`, at its pace so far (samples returned per second with a call
        in flight; one not yet measured is taken at the others' mean pace, or all alike). Ties:
        the lowest index."""
        live = self._live_or_fail()
        paces = {i: self.returned[i] / self.generating[i].busy_s for i in live if self.returned[i]}
        unknown = statistics.fmean(paces.values()) if paces else 1.0
        return sorted(live, key=lambda i: ((self.outstanding[i] + size) / paces.get(i, unknown), i))

    async def on_live(self, index: int, work: Callable[[int], Awaitable[T]]) -> T:
        """`work(index)`; if generator `index` is lost meanwhile, `work` again on its stand-in."""
        while True:
            try:
                return await work(index)
            except GeneratorLost:
                index = self.stand_in(index)

    # Calls (a lost call is made again on the respawned generator)

    async def generate(
        self, index: int, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]:
        """`n` completions of each prompt from generator `index`."""
        requests = len(prompt_ids) * n
        self.outstanding[index] += requests  # before the first await: the next routing choice sees it
        try:
            with self.generating[index]:
                groups = await self._call(index, lambda g: self._replies.call_one(g.generate, prompt_ids, sampling, n, alive=g.where), requests)
            self.returned[index] += requests
            return groups
        finally:
            self.outstanding[index] -= requests

    async def version(self, index: int) -> int:
        """The policy version generator `index` samples with now."""
        return await self._call(index, lambda g: g.get_version.call_one())

    async def live_versions(self) -> list[int]:
        """The version each generator not lost samples with now."""
        versions = []
        for index in self.live():
            try:
                versions.append(await self.version(index))
            except GeneratorLost:
                pass
        return versions

    async def hold_weights(self, index: int, hold: bool) -> int:
        """Keep (True) or release (False) generator `index`'s weights; returns their version."""
        return await self._call(index, lambda g: g.hold_weights.call_one(hold))

    async def load_version(self, index: int, version: int) -> Loaded | ReceiverLost:
        """Generator `index` loads `version` from torchstore, or is lost (its node is gone)."""
        try:
            loaded = await self._call(index, lambda g: self._replies.call_one(g.load_version, version, alive=g.where))
        except GeneratorLost as lost:
            return ReceiverLost(str(lost))
        return Loaded(loaded["version"])

    async def set_rng_state(self, index: int, state) -> None:
        await self._call(index, lambda g: g.set_rng_state.call_one(state))

    async def _call(self, index: int, call: Callable[[object], Awaitable], requests: int = 0):
        """`call(generator index)`; `requests`: the completions it asks for (counted as lost if it dies)."""
        if index in self.lost:
            raise GeneratorLost(self.lost[index])
        actor = self._actors[index]

        async def failed(err: Exception) -> None:
            nonlocal actor
            self.lost_requests += requests
            await self._restart(index, actor, err)
            actor = self._actors[index]

        return await supervised(lambda: call(actor), failed)

    # Questions to each generator as it is (None from one that has failed; no respawn)

    async def stats(self) -> list[dict | None]:
        return await self._ask_each(lambda g: g.stats.call_one())

    async def rng_states(self) -> list:
        return await self._ask_each(lambda g: g.rng_state.call_one())

    async def _ask_each(self, call: Callable[[object], Awaitable]) -> list:
        """Each generator's answer; None from one that is lost, has failed, or has not answered within
        ANSWER_TIMEOUT_S (a hung engine). One that did not answer is asked nothing more until it is
        respawned, so a run's stop is not held up by it."""
        answers = []
        for index, actor in enumerate(self._actors):
            if index in self.lost or index in self._unanswering:  # a call might not even end
                answers.append(None)
                continue
            try:
                answers.append(await within(call(actor), ANSWER_TIMEOUT_S))
            except TimeoutError:
                self._unanswering.add(index)
                print(f"generator {index} did not answer within {ANSWER_TIMEOUT_S} s: left out", flush=True)
                answers.append(None)
            except Exception as err:
                if not is_proc_failure(err):
                    raise
                self._unanswering.add(index)
                answers.append(None)
        return answers

    async def trace_spans(self) -> dict[str, Awaitable]:
        """Each generator's pending spans call, by track (the caller bounds the wait)."""
        answering = [i for i in self.live() if i not in self._unanswering]
        return {f"generator {i}": self._actors[i].trace_spans.call_one() for i in answering}

    def nodes(self) -> list[int]:
        return [self.procs_file.where[str(roles.generator(i))].node for i in range(self.count)]

    # Failures

    async def _restart(self, index: int, dead, err: Exception) -> None:
        """Replace generator `index` once per failure, however many callers saw it fail."""
        async with self._restart_locks[index]:
            if index in self.lost:
                raise GeneratorLost(self.lost[index])
            if self._actors[index] is dead:
                await self._replace(index, err)

    async def _replace(self, index: int, err: Exception) -> None:
        role = roles.generator(index)
        where = self.procs_file.where[str(role)]
        if not self.procs_file.hosts.reachable(where.node):  # the host is gone: no respawn to count
            self._lose(index, f"node {where.node} does not answer")
        if self.restarts >= self.max_restarts:
            raise GeneratorFailed(
                f"generator {index} ({located(where)}) failed and "
                f"generator.max_restarts={self.max_restarts} restarts are used up: {err}"
            )
        self.restarts += 1
        start = time.perf_counter()
        print(
            f"generator {index} ({located(where)}) failed; "
            f"respawning (restart {self.restarts}/{self.max_restarts}) ...",
            flush=True,
        )
        await stop_quietly(self._procs[index])
        try:
            await within(self._spawn(index), _RESPAWN_TIMEOUT_S)
        except Exception as respawn_err:  # its node is gone (or cannot start procs)
            self._lose(index, f"{type(respawn_err).__name__} {respawn_err}")
        self._unanswering.discard(index)
        if self.on_replaced is not None:
            await self.on_replaced(index, self._actors[index])
        print(f"generator {index} back in {time.perf_counter() - start:.1f}s", flush=True)

    def _lose(self, index: int, why: str) -> None:
        """Generator `index` failed and cannot be brought back: lost (GeneratorLost), or the last (GeneratorFailed)."""
        where = self.procs_file.where[str(roles.generator(index))]
        self.lose(index, f"failed and cannot be respawned on node {where['node']}: {why}")
        raise GeneratorLost(self.lost[index])

    def lose(self, index: int, why: str) -> None:
        """Generator `index` is lost (`why`): no more calls go to it; GeneratorFailed if it was the last."""
        if index in self.lost:
            return
        self.lost[index] = f"generator {index} ({located(self.procs_file.where[str(roles.generator(index))])}) {why}"
        self.losses.append(self.lost[index])
        if not self.live():
            raise GeneratorFailed(self.lost[index])
        print(f"{self.lost[index]}; the run goes on with generators {self.live()}", flush=True)

    async def stop(self) -> None:
        """Stop every generator that can be reached; one that left a question unanswered (hung, or
        failed but not yet gone) is killed first where it runs on the controller's host: its stop
        would only time out."""
        self._kill_hung_here()
        await asyncio.gather(
            *(stop_quietly(p) for i, p in enumerate(self._procs) if self.procs_file.reachable(roles.generator(i)))
        )

    def _kill_hung_here(self) -> None:
        here = self.procs_file.where["controller"].host
        for index in self._unanswering:
            where = self.procs_file.where.get(str(roles.generator(index)))
            if isinstance(where, Where) and where.host == here:
                try:
                    os.kill(where.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@dataclass(frozen=True)
class GeneratorCalls:
    """Generate calls to generator `index` of `pool`: the Generate of rollouts and evaluations."""

    pool: GeneratorPool
    index: int

    async def __call__(self, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int) -> list[list[Completion]]:
        return await self.pool.generate(self.index, prompt_ids, sampling, n)
