"""What the trainer's calls answer the controller with (light: the controller reads these
without importing torch)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    """A version the trainer published: how long it took, and the bytes of one copy (all ranks' shards)."""

    version: int
    push_ms: float
    weight_bytes: int


@dataclass(frozen=True)
class TrainedStep:
    """One optimizer step (Learner.train_step): the version it made and its figures (`train/loss`, ...)."""

    version: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class StepResult:
    """What one train_and_push call did: the new version, the step's figures, the publish."""

    version: int
    metrics: dict[str, float]
    push_ms: float
    weight_bytes: int


@dataclass(frozen=True)
class StateSaved:
    """The model and optimizer state of `version` is on disk (every rank's shard)."""

    version: int
    save_ms: float


@dataclass(frozen=True)
class PolicySaved:
    """The policy is a Hugging Face checkpoint at `path`."""

    path: str


@dataclass(frozen=True)
class SaveFailed:
    """A write failed (a full disk): why, in a few words. Returned, not raised: an endpoint that
    raised would end the trainer's actor."""

    why: str
