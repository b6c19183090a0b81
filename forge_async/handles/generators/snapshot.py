"""The snapshot: the policy as it was some steps ago, playing the `snapshot` seats (env.seats).

    trainer --version v--> its shared-memory channel --(between engine steps)--> trained policy's generators
                                      |
                                      +--(once v is env.snapshot.refresh_steps past the snapshot)--> snapshot's

The snapshot has generators of its own (env.snapshot.generators; procs `generator<count>`, ...,
after the trained policy's generator.count) on the trainer's node. They read the trainer's channel
as the trained policy's generators there do, but hold their weights from the start
(`hold_weights`): they take no version by themselves. Weight delivery tells the snapshot of each
version published (`published`); once the newest is refresh_steps or more past the snapshot's,
every snapshot generator is told to load it (`load_version`), swapped in between its engine steps
as every update is (generator.swap_mode). The refresh runs beside the training loop, which never
waits for it; one still running when the next is due is not doubled (the next version published
checks again). The channel keeps the newest two versions only: a refresh takes the newest, so the
snapshot's lag behind the trained policy runs from 0 to refresh_steps.

A respawned snapshot generator holds the channel's newest version (the one it had may be gone).

They are not the trained policy's generators: the rollout workers, admission control, weight
delivery's versions and evaluations never see them. Only snapshot seats' turns go to them
(`turn`, sent together as the rollouts' turns are: rollout/turn_batcher.py); nothing they sample
is trained on, so the staleness check (max_policy_age) never meets their tokens.
"""

import asyncio
import time

from forge_async.data.episode import Completion
from forge_async.generation.config import SamplingConfig
from forge_async.handles.generators.pool import GeneratorPool
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.rollout.turn_batcher import TurnBatcher
from forge_async.weights.outcomes import Loaded
from forge_async.weights.shared_memory import SharedMemoryChannel


class Snapshot:
    def __init__(self, pool: GeneratorPool, refresh_steps: int, channel_dir: str, turn_batch_wait_s: float):
        """`pool`: the snapshot's generators; `channel_dir`: the trainer's channel they read."""
        self.pool = pool
        self.refresh_steps = refresh_steps
        self.channel = SharedMemoryChannel(channel_dir)
        self.versions = [0] * pool.count  # the version each snapshot generator holds
        self.newest = 0  # the trainer's newest version published
        self.refreshes = 0
        self.refresh_ms = 0.0  # the last refresh's, all its generators'
        self.refresh_bytes = 0  # bytes copied into the snapshot's generators by the last refresh
        self._refreshing: asyncio.Task | None = None
        self._turns = TurnBatcher(self._generate, turn_batch_wait_s)

    @classmethod
    def of_run(cls, config, spawner: RoleSpawner, procs_file: ProcsFile) -> "Snapshot | None":
        """The run's snapshot, if env.seats or eval.seats has a `snapshot` seat (config: GRPOConfig's)."""
        from forge_async.envs.seats import SNAPSHOT

        env = getattr(config, "env", None)
        seats = [] if env is None else [*env.seats, *config.eval.seats]
        if SNAPSHOT not in seats:
            return None
        c = env.snapshot
        pool = GeneratorPool(spawner, procs_file, c.generators, config.generator.max_restarts, config.generator.count)
        return cls(pool, c.refresh_steps, config.weights.channel_dir, env.turn_batch_wait_s)

    @property
    def version(self) -> int:
        """The oldest version a snapshot generator holds."""
        return min(self.versions)

    async def start(self) -> list[float]:
        """Its generators spawned, each holding the initial weights; returns their engines' start times."""
        starts = await self.pool.start()
        self.versions = list(await asyncio.gather(*(self.pool.hold_weights(i, True) for i in range(self.pool.count))))
        self.pool.on_replaced = self._replaced
        return starts

    async def _replaced(self, index: int, generator) -> None:
        self.versions[index] = await generator.hold_weights.call_one(True)

    def published(self, version: int) -> None:
        """The trainer published `version`: a refresh starts if one is due and none is running."""
        self.newest = version
        running = self._refreshing is not None and not self._refreshing.done()
        if not running and version - self.version >= self.refresh_steps:
            self._refreshing = asyncio.create_task(self._refresh(version))

    def check(self) -> None:
        """Raise a refresh's failure (its generators failed past their restarts)."""
        task = self._refreshing
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()

    async def _refresh(self, version: int) -> None:
        start = time.perf_counter()
        live = self.pool.live()
        outcomes = await asyncio.gather(*(self.pool.load_version(i, version) for i in live))
        loaded = 0
        for index, outcome in zip(live, outcomes):
            if isinstance(outcome, Loaded):
                self.versions[index] = outcome.version
                loaded += 1
        self.refreshes += 1
        self.refresh_ms = (time.perf_counter() - start) * 1e3
        self.refresh_bytes = loaded * self._version_bytes()

    def _version_bytes(self) -> int:
        """The size of one version in the channel (every version of a run has the same layout)."""
        return self.channel.slot_path(0).stat().st_size

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One snapshot seat's turn, sent with the other snapshot turns asked meanwhile."""
        return await self._turns(prompt_ids, sampling)

    async def _generate(self, prompts: list[list[int]], sampling: SamplingConfig, n: int) -> list[list[Completion]]:
        index = self.pool.by_finish_time(len(prompts) * n)[0]
        return await self.pool.on_live(index, lambda generator: generator.generate(prompts, sampling, n))

    def metrics(self) -> dict[str, float]:
        """The snapshot's version and its lag behind the trainer's newest, its refreshes, and the last
        one's time and bytes."""
        return {
            "snapshot/version": self.version,
            "snapshot/lag": self.newest - self.version,
            "snapshot/refreshes": self.refreshes,
            "snapshot/refresh_ms": self.refresh_ms,
            "snapshot/refresh_bytes": self.refresh_bytes,
        }

    async def close(self) -> None:
        """Cancel a refresh still running (the run is ending)."""
        if self._refreshing is not None:
            self._refreshing.cancel()
            await asyncio.gather(self._refreshing, return_exceptions=True)

    async def stop(self) -> None:
        await self.close()
        await self.pool.stop()
