"""What a Learner is built from, as one value: built once by the controller and passed down
whole to the trainer's procs (handles/spawner.py -> handles/meshes.py -> actors/trainer.py ->
learning/learner.py). Light: configs only, no torch."""

from dataclasses import dataclass, field

from forge_async.learning.config import TrainerConfig
from forge_async.losses.config import ImportanceConfig, LossConfig
from forge_async.models.config import LoraConfig, MoeConfig


@dataclass(frozen=True)
class LearnerSpec:
    """The policy's checkpoint, the trainer's config, and the loss it trains with.

    `reference_path`: the reference policy's checkpoint when the trainer computes its logprobs
    itself (scorers[i].runs_on=trainer); None: episodes bring them from the scorer tier.
    `kl_coef`: the reference_kl scorer's coef (0: no KL penalty). `temperature`: what the logits
    are divided by, the policy's and the reference's, to get the distribution the generators
    sampled from (sampling.logit_temperature); kept sets come with the episodes.
    """

    checkpoint_path: str
    config: TrainerConfig
    pad_id: int
    loss: LossConfig = field(default_factory=LossConfig)
    importance: ImportanceConfig = field(default_factory=ImportanceConfig)
    kl_coef: float = 0.0
    reference_path: str | None = None
    lora: LoraConfig | None = None
    moe: MoeConfig | None = None
    temperature: float = 1.0
