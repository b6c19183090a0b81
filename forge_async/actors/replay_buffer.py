"""ReplayBuffer: the EpisodeBuffer policy behind a Monarch actor, between generators and trainer."""

from monarch.actor import endpoint

from forge_async.actors.proc_actor import ProcActor
from forge_async.data.buffer import EpisodeBuffer
from forge_async.data.episode import Episode
from forge_async.tracing import TRACER


class ReplayBuffer(ProcActor):
    def __init__(
        self,
        max_policy_age: int,
        capacity: int,
        drop_zero_variance: bool = False,
        max_zero_variance_drops: int | None = None,
    ):
        self.buffer = EpisodeBuffer(max_policy_age, capacity, drop_zero_variance, max_zero_variance_drops)

    @endpoint
    async def add(self, episodes: list[Episode], dropped: dict[str, int] | None = None) -> int:
        with TRACER.span("add"):
            self.buffer.add(episodes, dropped)
        return len(self.buffer)

    @endpoint
    async def sample(self, batch_size: int, trainer_version: int) -> list[Episode] | None:
        with TRACER.span("sample"):
            return self.buffer.sample(batch_size, trainer_version)

    @endpoint
    async def sample_with_stats(self, batch_size: int, trainer_version: int) -> tuple[list[Episode] | None, dict]:
        """`sample`, then `stats`, in one call: the training loop's, one round trip per step."""
        with TRACER.span("sample"):
            return self.buffer.sample(batch_size, trainer_version), self.buffer.stats()

    @endpoint
    async def stats(self) -> dict:
        return self.buffer.stats()

    @endpoint
    async def state_dict(self) -> dict:
        return self.buffer.state_dict()

    @endpoint
    async def load_state_dict(self, state: dict) -> None:
        self.buffer.load_state_dict(state)
