"""The replay buffer actor, respawned empty if its proc dies.

The handle keeps its own count of what went in and came out (`BufferLedger`), so that when a
buffer is lost, the episodes it held are counted (`buffer_lost`) in the new buffer's counters
and the run's accounting still adds up.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

from monarch.actor import ProcMesh

from forge_async.data.buffer import BufferStats, DropCounts, check_added
from forge_async.data.episode import Episode
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.mesh.supervision import stop_quietly
from forge_async.mesh.roles import REPLAY_BUFFER
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.reply_port import ReplyPort
from forge_async.observability.spans import Span


@dataclass
class BufferLedger:
    """The buffer's counters as its handle last knew them: what went in (`added`, by the handle's
    count), came out (`sampled`), and was dropped (by reason, as the buffer's stats said); the
    keys of the buffer's `state_dict` that hold them."""

    added: int = 0
    sampled: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # every drop, those of `not_started` included
    not_started: dict[str, int] = field(default_factory=dict)  # never reached a generator: not in `added`
    kept_zero_variance: int = 0

    @classmethod
    def of_state(cls, state: dict) -> "BufferLedger":
        """The counters of a buffer's `state_dict` (a checkpoint's)."""
        return cls(
            state["added"],
            state["sampled"],
            dict(state["dropped"]),
            dict(state.get("not_started", {})),
            state.get("kept_zero_variance", 0),
        )

    def note(self, stats: BufferStats) -> None:
        """The drop counters of the buffer's latest stats."""
        self.dropped = dict(stats.dropped_by_reason)
        self.not_started = dict(stats.not_started)
        self.kept_zero_variance = stats.kept_zero_variance

    def held(self) -> int:
        """The episodes the buffer holds: added = sampled + dropped (less not_started) + held."""
        return self.added - self.sampled - sum(self.dropped.values()) + sum(self.not_started.values())

    def lost(self, episodes: int) -> "BufferLedger":
        """These counters with `episodes` more dropped as `buffer_lost`."""
        dropped = dict(self.dropped)
        dropped["buffer_lost"] = dropped.get("buffer_lost", 0) + episodes
        return BufferLedger(self.added, self.sampled, dropped, dict(self.not_started), self.kept_zero_variance)


class BufferHandle(RoleHandle):
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile):
        super().__init__(spawner, procs_file, REPLAY_BUFFER)
        self._ledger = BufferLedger()
        self._replies = ReplyPort()  # add and sample, every step: answered on one port

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        return await self.spawner.replay_buffer()

    async def add(self, episodes: list[Episode], *, dropped: DropCounts | None = None) -> None:
        """Episodes into the buffer, with the samples lost on their way to it, by reason."""
        check_added(episodes, dropped)  # here, before the call: the caller's mistake, not the buffer's
        await self._call(
            lambda: self._replies.call_one(self.actor.add, episodes, dropped=dropped, alive=self.actor.where)
        )
        self._ledger.added += len(episodes) + (0 if dropped is None else dropped.generated())

    async def sample(
        self, batch_size: int, *, trainer_version: int, wait_s: float = 0.0
    ) -> tuple[list[Episode] | None, BufferStats]:
        """A batch (None: not enough fresh episodes yet, after waiting up to `wait_s` for the next
        add) and the buffer's stats after taking it."""
        batch, stats = await self._call(
            lambda: self._replies.call_one(
                self.actor.sample_with_stats,
                batch_size,
                trainer_version=trainer_version,
                wait_s=wait_s,
                alive=self.actor.where,
            )
        )
        if batch is not None:
            self._ledger.sampled += len(batch)
        return batch, self._noted(stats)

    async def stats(self) -> BufferStats:
        return self._noted(await self._call(lambda: self.actor.stats.call_one()))

    def _noted(self, stats: BufferStats) -> BufferStats:
        self._ledger.note(stats)
        return stats

    async def state_dict(self) -> dict:
        return await self._call(lambda: self.actor.state_dict.call_one())

    async def load_state_dict(self, state: dict) -> None:
        await self._call(lambda: self.actor.load_state_dict.call_one(state))
        self._ledger = BufferLedger.of_state(state)

    async def trace_spans(self) -> list[Span]:
        return await self.actor.trace_spans.call_one()

    async def _failed(self, err: Exception, called: Any) -> None:
        async with self._respawning:  # once per failure, however many callers saw it
            if self.actor is called:
                await self._replace()

    async def _replace(self) -> None:
        held = self._ledger.held()
        print(
            f"replay buffer ({self.located()}) failed; respawning it, "
            f"{held} episodes it held are lost (counted as buffer_lost)",
            flush=True,
        )
        await stop_quietly(self.procs)
        await self.start()
        self._ledger = self._ledger.lost(held)
        await self.actor.load_state_dict.call_one({"episodes": [], **asdict(self._ledger)})
