"""The replay buffer actor, respawned empty if its proc dies.

The handle keeps its own count of what went in and came out, so that when a
buffer is lost, the episodes it held are counted (`buffer_lost`) in the new
buffer's counters and the run's accounting still adds up.
"""

from forge_async.data.buffer import BufferStats, DropCounts, NotStarted
from forge_async.data.episode import Episode
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.mesh.supervision import stop_quietly
from forge_async.mesh.roles import REPLAY_BUFFER
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.reply_port import ReplyPort


class BufferHandle(RoleHandle):
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile):
        super().__init__(spawner, procs_file, REPLAY_BUFFER)
        self._counters = {"added": 0, "sampled": 0, "dropped": {}, "not_started": {}, "kept_zero_variance": 0}
        self._replies = ReplyPort()  # add and sample, every step: answered on one port

    async def _spawn(self) -> tuple:
        return await self.spawner.replay_buffer()

    async def add(self, episodes: list[Episode], dropped: DropCounts | None = None) -> None:
        """Episodes into the buffer, with the samples lost on their way to it, by reason."""
        await self._call(lambda: self._replies.call_one(self.actor.add, episodes, dropped, alive=self.actor.where))
        started = (n for reason, n in (dropped or {}).items() if not isinstance(reason, NotStarted))
        self._counters["added"] += len(episodes) + sum(started)

    async def sample(
        self, batch_size: int, trainer_version: int, wait_s: float = 0.0
    ) -> tuple[list[Episode] | None, BufferStats]:
        """A batch (None: not enough fresh episodes yet, after waiting up to `wait_s` for the next
        add) and the buffer's stats after taking it."""
        batch, stats = await self._call(
            lambda: self._replies.call_one(
                self.actor.sample_with_stats, batch_size, trainer_version, wait_s, alive=self.actor.where
            )
        )
        if batch is not None:
            self._counters["sampled"] += len(batch)
        return batch, self._noted(stats)

    async def stats(self) -> BufferStats:
        return self._noted(await self._call(lambda: self.actor.stats.call_one()))

    def _noted(self, stats: BufferStats) -> BufferStats:
        self._counters["dropped"] = dict(stats.dropped_by_reason)
        self._counters["not_started"] = dict(stats.not_started)
        self._counters["kept_zero_variance"] = stats.kept_zero_variance
        return stats

    async def state_dict(self) -> dict:
        return await self._call(lambda: self.actor.state_dict.call_one())

    async def load_state_dict(self, state: dict) -> None:
        await self._call(lambda: self.actor.load_state_dict.call_one(state))
        self._counters = {k: state[k] for k in ("added", "sampled", "dropped")}
        self._counters["not_started"] = state.get("not_started", {})
        self._counters["kept_zero_variance"] = state.get("kept_zero_variance", 0)

    async def trace_spans(self) -> list:
        return await self.actor.trace_spans.call_one()

    async def _failed(self, err: Exception, called) -> None:
        async with self._respawning:  # once per failure, however many callers saw it
            if self.actor is called:
                await self._replace()

    async def _replace(self) -> None:
        c = self._counters
        held = c["added"] - c["sampled"] - sum(c["dropped"].values()) + sum(c["not_started"].values())
        dropped = dict(c["dropped"])
        dropped["buffer_lost"] = dropped.get("buffer_lost", 0) + held
        print(
            f"replay buffer ({self.located()}) failed; respawning it, "
            f"{held} episodes it held are lost (counted as buffer_lost)",
            flush=True,
        )
        await stop_quietly(self.procs)
        await self.start()
        self._counters = {**c, "dropped": dropped}
        await self.actor.load_state_dict.call_one({"episodes": [], **self._counters})
