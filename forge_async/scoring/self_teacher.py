"""A teacher that is the policy itself some steps ago (`{kind: teacher, model: self, lag: K,
refresh_steps: M}`): self-distillation against a lagged copy, refreshed during the run.

Its LogprobModel proc (actors/logprob_model.py) starts from the initial policy and is fed
the trainer's published weights through the trainer's shared-memory channel, as the
generators on the trainer's node are: refreshed every M steps to the version K steps before
(weights/lagged.py), the proc copying that version aside (`take_version`) and loading it
(`use_taken`) when told. `distill/teacher_version` says the version it holds.
"""

from typing import Protocol

from forge_async.scoring.config import ScorerConfig
from forge_async.weights.lagged import LaggedFollower


class TeacherModel(Protocol):
    """The teacher's proc (handles/scorers.py: ScorerModelHandle)."""

    async def take_version(self, version: int) -> int: ...

    async def use_taken(self) -> int: ...


class SelfTeacher(LaggedFollower):
    def __init__(self, config: ScorerConfig, model: TeacherModel):
        super().__init__(config.lag, config.refresh_steps)
        self.model = model

    async def take(self, version: int) -> None:
        await self.model.take_version(version)

    async def use(self, version: int) -> int:
        return await self.model.use_taken()

    def metrics(self) -> dict[str, float]:
        """The teacher's version, its lag behind the trainer's newest, its refreshes so far."""
        return {
            "distill/teacher_version": self.version,
            "distill/teacher_lag": self.newest - self.version,
            "distill/teacher_refreshes": self.refreshes,
        }
