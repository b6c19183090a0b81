"""ReplayBuffer: the EpisodeBuffer policy behind a Monarch actor, between generators and trainer."""

import asyncio

from monarch.actor import concurrent_endpoint, endpoint

from forge_async.mesh.proc_actor import ProcActor
from forge_async.data.buffer import BufferStats, DropCounts, EpisodeBuffer
from forge_async.data.episode import Episode
from forge_async.mesh.reply_port import answers_on_port
from forge_async.observability.span_names import REPLAY_ADD, REPLAY_SAMPLE
from forge_async.observability.spans import TRACER


class ReplayBuffer(ProcActor):
    def __init__(
        self,
        *,
        max_policy_age: int,
        capacity: int,
        drop_zero_variance: bool = False,
        max_zero_variance_drops: int | None = None,
    ):
        self.buffer = EpisodeBuffer(
            max_policy_age=max_policy_age,
            capacity=capacity,
            drop_zero_variance=drop_zero_variance,
            max_zero_variance_drops=max_zero_variance_drops,
        )
        self._added = asyncio.Event()  # set by every add: wakes a sample_with_stats that waits

    @endpoint
    @answers_on_port
    async def add(self, episodes: list[Episode], *, dropped: DropCounts | None = None) -> int:
        """Hold `episodes`; `dropped`: the samples of their groups lost on the way (EpisodeBuffer.add).
        Returns the episodes held."""
        with TRACER.span(REPLAY_ADD):
            self.buffer.add(episodes, dropped=dropped)
        self._added.set()
        return len(self.buffer)

    @endpoint
    async def sample(self, batch_size: int, *, trainer_version: int) -> list[Episode] | None:
        return self._sample(batch_size, trainer_version)

    @concurrent_endpoint  # while it waits, the actor takes the adds it waits for
    @answers_on_port
    async def sample_with_stats(
        self, batch_size: int, *, trainer_version: int, wait_s: float = 0.0
    ) -> tuple[list[Episode] | None, BufferStats]:
        """`sample`, then `stats`, in one call: the training loop's, one round trip per step.

        With `wait_s`, a call that finds no batch, and dropped nothing the caller should hear
        about, waits up to `wait_s` for the next add and tries once more: a batch leaves the
        moment its last episodes arrive, two messages sooner than if the caller asked again."""
        self._added.clear()
        dropped_before = self.buffer.dropped.total()
        batch = self._sample(batch_size, trainer_version)
        if batch is None and wait_s > 0 and self.buffer.dropped.total() == dropped_before:
            try:
                await asyncio.wait_for(self._added.wait(), wait_s)
            except TimeoutError:
                pass
            else:
                batch = self._sample(batch_size, trainer_version)
        return batch, self.buffer.stats()

    def _sample(self, batch_size: int, trainer_version: int) -> list[Episode] | None:
        with TRACER.span(REPLAY_SAMPLE):
            return self.buffer.sample(batch_size, trainer_version=trainer_version)

    @endpoint
    async def stats(self) -> BufferStats:
        return self.buffer.stats()

    @endpoint
    async def state_dict(self) -> dict:
        return self.buffer.state_dict()

    @endpoint
    async def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state)
