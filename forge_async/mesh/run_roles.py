"""What a run brings up beside its trainer and generators, and what its trainer trains with.

The spawning (mesh/procs.py, handles/spawner.py, handles/spawn_run.py) reads a run's sections
(controller/config.py RunConfig) and these: GRPO's (`GRPOConfig.run_roles`: a replay buffer, the
scorers, environment procs, importance correction and the reference's KL), or a trainer and
generators alone with the run's loss (`SFTConfig.run_roles`: `RunRoles(loss)`).
"""

from dataclasses import dataclass, field

from forge_async.losses.config import ImportanceConfig, LossConfig
from forge_async.scoring.config import ScorerConfig


@dataclass(frozen=True)
class BufferSpec:
    """The replay buffer's settings (actors/replay_buffer.py)."""

    max_policy_age: int
    capacity: int
    drop_zero_variance: bool
    max_zero_variance_drops: int | None


@dataclass(frozen=True)
class RunRoles:
    loss: LossConfig
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    kl_coef: float = 0.0  # the reference_kl scorer's coef: the trainer's KL penalty (0: none)
    trainer_reference: int | None = None  # the reference_kl scorer the trainer runs itself, by position
    replay_buffer: BufferSpec | None = None  # None: the run has none
    scorers: list[ScorerConfig] = field(default_factory=list)  # model scorers get procs of their own
    environment_procs: int = 0

    @property
    def model_scorers(self) -> list[int]:
        """The positions of the scorers that run a model."""
        return [i for i, s in enumerate(self.scorers) if s.runs_a_model]
