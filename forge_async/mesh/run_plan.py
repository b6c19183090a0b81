"""What a run brings up, where, and what each role is built from: the run's plan.

Each app's config builds it once (`RunConfig.plan()`, GRPO's adding its own roles); the spawning
(mesh/procs.py, handles/spawner.py, handles/spawn_run.py) and weight routing (weights/route.py)
read the plan, never the root config: a component is built from its own sections.

A plan holds the sections the roles are built from (placement, trainer, generator, sampling,
weights, model, moe), what the trainer trains with (loss, importance, the reference's KL), and
one spec per role that a run may have or not: a replay buffer, model scorers, environment procs,
a snapshot seat's generators, a rival seat's policy. An SFT run has a trainer and generators
alone, with the sft objective.
"""

from dataclasses import dataclass, field
from typing import Literal

from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.learning.config import TrainerConfig
from forge_async.learning.rival_config import RivalConfig
from forge_async.losses.config import ImportanceConfig, LossConfig
from forge_async.mesh.config import PlacementConfig
from forge_async.models.config import ModelConfig, MoeConfig
from forge_async.scoring.config import ScorerConfig
from forge_async.weights.config import WeightsConfig
from forge_async.weights.route import Layout


@dataclass(frozen=True)
class BufferSpec:
    """The replay buffer's settings (actors/replay_buffer.py)."""

    max_policy_age: int
    capacity: int
    drop_zero_variance: bool
    max_zero_variance_drops: int | None


@dataclass(frozen=True)
class SnapshotSpec:
    """A `snapshot` seat's generators (handles/generators/snapshot.py): env.snapshot.*."""

    generators: int
    lag: int
    refresh_steps: int
    first_generator: int  # its first generator proc's index: after the trained policy's
    turn_batch_wait_s: float


@dataclass(frozen=True)
class RivalSpec:
    """A `rival` seat's policy (handles/rival.py, controller/rival_loop.py): `rival.*`, and what it
    shares with the trained policy's learning."""

    rival: RivalConfig
    seed: int  # its tiny model's init seed, where rival.path is null
    first_generator: int  # its first generator proc's index: after the trained policy's and a snapshot's
    turn_batch_wait_s: float
    mode: Literal["async", "sync"]
    batch_size: int
    max_policy_age: int
    buffer_capacity: int


@dataclass(frozen=True)
class RunPlan:
    placement: PlacementConfig
    trainer: TrainerConfig
    generator: GeneratorConfig
    sampling: SamplingConfig
    weights: WeightsConfig
    model: ModelConfig
    moe: MoeConfig
    trace: bool  # trace.enabled: the procs record spans
    loss: LossConfig
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    kl_coef: float = 0.0  # the reference_kl scorer's coef: the trainer's KL penalty (0: none)
    trainer_reference: int | None = None  # the reference_kl scorer the trainer runs itself, by position
    replay_buffer: BufferSpec | None = None  # None: the run has none
    scorers: tuple[ScorerConfig, ...] = ()  # model scorers get procs of their own
    environment_procs: int = 0
    snapshot: SnapshotSpec | None = None
    rival: RivalSpec | None = None

    @property
    def model_scorers(self) -> list[int]:
        """The positions of the scorers that run a model."""
        return [i for i, s in enumerate(self.scorers) if s.runs_a_model]

    def layout(self) -> Layout:
        """Where the trainer and the trained policy's generators run: what weight routing reads."""
        hosts = tuple(self.placement.generator_host(i) for i in range(self.generator.count))
        return Layout(tuple(self.placement.trainer_hosts), hosts)

    def meshes(self) -> str:
        """The meshes a run spawns, as the start-up line names them."""
        meshes = [f"trainer x{self.trainer.procs}", f"generators x{self.generator.count}"]
        if self.replay_buffer is not None:
            meshes.append("replay buffer")
        if self.model_scorers:
            meshes.append(f"model scorers x{len(self.model_scorers)}")
        if self.environment_procs:
            meshes.append(f"environments x{self.environment_procs}")
        if self.snapshot is not None:
            meshes.append(f"snapshot generators x{self.snapshot.generators}")
        if self.rival is not None:
            meshes.append(f"rival trainer x{self.trainer.procs}, rival generators x{self.rival.rival.generators}")
        return ", ".join(meshes)
