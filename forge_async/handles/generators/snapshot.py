"""The snapshot: the policy as it was some steps ago, playing the `snapshot` seats (env.seats).

    trainer --version v--> its shared-memory channel --(between engine steps)--> trained policy's generators
                                      |
                                      +--(every env.snapshot.refresh_steps, K behind)--> snapshot's generators

The snapshot has generators of its own (env.snapshot.generators; procs `generator<count>`, ...,
after the trained policy's generator.count) on the trainer's node. They read the trainer's channel
as the trained policy's generators there do, but hold their weights from the start
(`hold_weights`): they take no version by themselves. Weight delivery tells the snapshot of each
version published (`published`), and it follows them as a lagged follower does
(weights/lagged.py): refreshed every M = env.snapshot.refresh_steps steps to the version
K = env.snapshot.lag steps before the refresh. Each of its generators copies that version aside
when it is published (`take_version`; K = 0 copies nothing) and swaps it in at the refresh
(`use_taken`, or `load_version` for K = 0), between its engine steps as every update is
(generator.swap_mode). All of it runs beside the training loop, which never waits for it.

A respawned snapshot generator holds the channel's newest version (the one it had may be gone);
a resumed run's snapshot takes the restored version at once (the older ones are gone with the
run that made them), and follows the schedule from there.

They are not the trained policy's generators: the rollout workers, admission control, weight
delivery's versions and evaluations never see them. Only snapshot seats' turns go to them
(`turn`, sent together as the rollouts' turns are: envs/turn_batcher.py); nothing they sample
is trained on, so the staleness check (max_policy_age) never meets their tokens.
"""

import asyncio
import time

from forge_async.data.episode import Completion
from forge_async.generation.config import SamplingConfig
from forge_async.handles.generators.failures import GeneratorLost
from forge_async.handles.generators.pool import GeneratorPool
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.run_plan import SnapshotSpec
from forge_async.envs.turn_batcher import TurnBatcher
from forge_async.weights.lagged import LaggedFollower
from forge_async.weights.outcomes import Loaded
from forge_async.weights.shared_memory import SharedMemoryChannel


class Snapshot(LaggedFollower):
    def __init__(self, pool: GeneratorPool, lag: int, refresh_steps: int, channel_dir: str, turn_batch_wait_s: float):
        """`pool`: the snapshot's generators; `channel_dir`: the trainer's channel they read."""
        super().__init__(lag, refresh_steps)
        self.pool = pool
        self.channel = SharedMemoryChannel(channel_dir)
        self.versions = [0] * pool.count  # the version each snapshot generator holds
        self.refresh_ms = 0.0  # the last refresh's (its swaps, all its generators')
        self.refresh_bytes = 0  # bytes copied into the snapshot's generators for the last refresh
        self._taken_bytes = 0  # bytes copied aside since the last refresh
        self._turns = TurnBatcher(pool.generate_soonest, turn_batch_wait_s)

    @classmethod
    def of_run(cls, spec: SnapshotSpec | None, spawner: RoleSpawner, procs_file: ProcsFile) -> "Snapshot | None":
        """The run's snapshot, if its plan has one (a `snapshot` seat in env.seats or eval.seats)."""
        if spec is None:
            return None
        plan = spawner.plan
        pool = GeneratorPool(spawner, procs_file, spec.generators, plan.generator.max_restarts, spec.first_generator)
        return cls(pool, spec.lag, spec.refresh_steps, plan.weights.chosen_dir, spec.turn_batch_wait_s)

    async def start(self) -> list[float]:
        """Its generators spawned, each holding the initial weights; returns their engines' start times."""
        starts = await self.pool.start()
        self.versions = list(await asyncio.gather(*(self.pool.hold_weights(i, True) for i in range(self.pool.count))))
        self.pool.on_replaced = self._replaced
        return starts

    async def _replaced(self, index: int, generator) -> None:
        self.versions[index] = await generator.hold_weights.call_one(True)
        self.version = min(self.versions)

    async def take(self, version: int) -> None:
        """Each live generator copies `version` aside (K = 0: nothing to copy, `use` loads it)."""
        if self.lag:
            copied = await asyncio.gather(
                *(self._on_live(i, lambda g: g.take_version(version)) for i in self.pool.live())
            )
            self._taken_bytes = sum(found is not None for found in copied) * self.channel.version_bytes(version)

    async def use(self, version: int) -> int:
        """Each live generator swaps in what it copied aside (K = 0: `version` itself); returns the
        oldest version they hold."""
        start = time.perf_counter()
        live = self.pool.live()
        outcomes = await asyncio.gather(*(self._load(i, version) for i in live))
        loaded = [(index, outcome.version) for index, outcome in zip(live, outcomes) if isinstance(outcome, Loaded)]
        for index, held in loaded:
            self.versions[index] = held
        self.refresh_ms = (time.perf_counter() - start) * 1e3
        self.refresh_bytes = self._taken_bytes + len(loaded) * self.channel.version_bytes(version)
        self._taken_bytes = 0
        return min(self.versions)

    async def _load(self, index: int, version: int):
        generator = self.pool[index]
        return await (generator.use_taken() if self.lag else generator.load_version(version))

    async def _on_live(self, index: int, call):
        """`call(generator index)`; None if it is lost."""
        try:
            return await call(self.pool[index])
        except GeneratorLost:
            return None

    async def turn(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """One snapshot seat's turn, sent with the other snapshot turns asked meanwhile."""
        return await self._turns(prompt_ids, sampling)

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

    async def stop(self) -> None:
        await self.close()
        await self.pool.stop()
