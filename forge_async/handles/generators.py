"""The generators: one proc and one vLLM engine each.

A generator whose proc dies is respawned (a new proc, then the newest weights:
`on_replaced`) and the call it lost is made again on the new one, up to
generator.max_restarts restarts in all; past that, or when its node is gone, the
run ends with a GeneratorFailed naming it (the trainer is fine: the run saves
what it learned).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from forge_async.actors.generator_config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.handles.procs_file import ProcsFile, located
from forge_async.handles.supervision import is_proc_failure, stop_quietly, supervised, within
from forge_async.launch import roles
from forge_async.launch.spawner import RoleSpawner
from forge_async.metrics import BusyClock

_RESPAWN_TIMEOUT_S = 40  # a generator that cannot be respawned in this long: its node is gone


class GeneratorFailed(RuntimeError):
    """Generators failed more often than generator.max_restarts allows, or could not be respawned."""


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
        self._procs: list = [None] * count
        self._actors: list = [None] * count
        self._restart_locks = [asyncio.Lock() for _ in range(count)]

    async def start(self) -> list[float]:
        """Every generator spawned at once; returns their engines' start times."""
        return list(await asyncio.gather(*(self._spawn(i) for i in range(self.count))))

    async def _spawn(self, index: int) -> float:
        self._procs[index], self._actors[index], timing = await self.spawner.generator(index)
        self.procs_file.record(roles.generator(index), await self._actors[index].where.call_one())
        return timing["engine_start_s"]

    # Calls (a lost call is made again on the respawned generator)

    async def generate(
        self, index: int, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]:
        """`n` completions of each prompt from generator `index`."""
        with self.generating[index]:
            requests = len(prompt_ids) * n
            return await self._call(index, lambda g: g.generate.call_one(prompt_ids, sampling, n), requests)

    async def version(self, index: int) -> int:
        """The policy version generator `index` samples with now."""
        return await self._call(index, lambda g: g.get_version.call_one())

    async def hold_weights(self, index: int, hold: bool) -> int:
        """Keep (True) or release (False) generator `index`'s weights; returns their version."""
        return await self._call(index, lambda g: g.hold_weights.call_one(hold))

    async def load_version(self, index: int, version: int) -> dict:
        """Generator `index` loads `version` from torchstore."""
        return await self._call(index, lambda g: g.load_version.call_one(version))

    async def set_rng_state(self, index: int, state) -> None:
        await self._call(index, lambda g: g.set_rng_state.call_one(state))

    async def _call(self, index: int, call: Callable[[object], Awaitable], requests: int = 0):
        """`call(generator index)`; `requests`: the completions it asks for (counted as lost if it dies)."""
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
        answers = []
        for actor in self._actors:
            try:
                answers.append(await call(actor))
            except Exception as err:
                if not is_proc_failure(err):
                    raise
                answers.append(None)
        return answers

    async def trace_spans(self) -> dict[str, Awaitable]:
        """Each generator's pending spans call, by track (the caller bounds the wait)."""
        return {f"generator {i}": actor.trace_spans.call_one() for i, actor in enumerate(self._actors)}

    def nodes(self) -> list[int]:
        return [self.procs_file.where[str(roles.generator(i))]["node"] for i in range(self.count)]

    # Failures

    async def _restart(self, index: int, dead, err: Exception) -> None:
        """Replace generator `index` once per failure, however many callers saw it fail."""
        async with self._restart_locks[index]:
            if self._actors[index] is dead:
                await self._replace(index, err)

    async def _replace(self, index: int, err: Exception) -> None:
        role = roles.generator(index)
        where = self.procs_file.where[str(role)]
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
            if not self.procs_file.hosts.reachable(where["node"]):
                raise ConnectionError(f"node {where['node']} does not answer")
            await within(self._spawn(index), _RESPAWN_TIMEOUT_S)
        except Exception as respawn_err:  # its node is gone (or cannot start procs)
            raise GeneratorFailed(
                f"generator {index} ({located(where)}) failed and could not be respawned on node "
                f"{where['node']} within {_RESPAWN_TIMEOUT_S}s: {type(respawn_err).__name__} {respawn_err}"
            ) from None
        if self.on_replaced is not None:
            await self.on_replaced(index, self._actors[index])
        print(f"generator {index} back in {time.perf_counter() - start:.1f}s", flush=True)

    async def stop(self) -> None:
        await asyncio.gather(
            *(stop_quietly(p) for i, p in enumerate(self._procs) if self.procs_file.reachable(roles.generator(i)))
        )


@dataclass(frozen=True)
class GeneratorCalls:
    """Generate calls to generator `index` of `pool`: the Generate of rollouts and evaluations."""

    pool: GeneratorPool
    index: int

    async def __call__(self, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int) -> list[list[Completion]]:
        return await self.pool.generate(self.index, prompt_ids, sampling, n)
