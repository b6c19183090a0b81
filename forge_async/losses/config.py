"""The loss's config section (light: read before torch is imported). Formulas: docs/loss.md."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_choice, check_range
from forge_async.errors import ConfigError

AGGREGATIONS = ("token_mean", "sequence_mean", "constant")
# grpo: the policy-gradient loss on sampled, scored episodes (losses/grpo.py; apps.grpo, apps.distill);
# sft: the negative log-likelihood of demonstrations (losses/sft.py; apps.sft sets it).
OBJECTIVES = ("grpo", "sft")


@dataclass
class LossConfig:
    objective: str = "grpo"
    # token_mean: over every response token of the batch (DAPO); sequence_mean: over each
    # sequence's tokens, then over sequences (GRPO); constant: sum / (sequences * max_tokens) (Dr.GRPO).
    aggregation: str = "token_mean"
    scale_by_std: bool = True  # advantages (r - mean) / std of the group; false: r - mean (Dr.GRPO)
    # PPO-style clip of the ratio pi_theta / pi_behaviour to [1 - clip_low, 1 + clip_high]
    # (clip-higher: clip_high > clip_low); null = off. Replaces importance.* (set importance.cap=null).
    clip_low: float | None = None
    clip_high: float | None = None
    # constant aggregation's tokens per sequence; null = sampling.max_tokens (x env.max_turns, multi-turn)
    max_tokens: int | None = None
    # Entropy bonus: minus this times the aggregated entropy of the response tokens' next-token
    # distributions (0 = off). Keeps a little exploration where every sample of a group agrees.
    entropy_coef: float = 0.0

    def __post_init__(self) -> None:
        check_choice("loss.objective", self.objective, OBJECTIVES)
        check_choice("loss.aggregation", self.aggregation, AGGREGATIONS)
        check_range("loss.clip_low", self.clip_low, Range(0, 1, low_open=True, high_open=True), nullable=True)
        check_range("loss.clip_high", self.clip_high, POSITIVE, nullable=True)
        if (self.clip_low is None) != (self.clip_high is None):
            raise ConfigError(
                f"loss.clip_low={self.clip_low}, loss.clip_high={self.clip_high}: set both (clipping on) or neither"
            )
        check_range("loss.max_tokens", self.max_tokens, AT_LEAST_1, nullable=True, note="null = sampling.max_tokens")
        check_range("loss.entropy_coef", self.entropy_coef, Range(0), note="0 = off")
        if self.objective == "sft" and self.clipped:
            raise ConfigError(
                "loss.clip_low/clip_high: the sft objective has no behaviour policy to clip against; set neither"
            )

    @property
    def clipped(self) -> bool:
        return self.clip_low is not None


IMPORTANCE_LEVELS = ("token", "sequence")
IMPORTANCE_MODES = ("truncate", "mask")


@dataclass
class ImportanceConfig:
    """Off-policy correction of the policy-gradient loss (formulas: docs/loss.md).

    The ratio r = pi_theta / pi_behaviour is per token (`level=token`) or per sequence
    (`level=sequence`: exp of the sum of the sequence's token log-ratios, shared by its
    tokens). `mode=truncate`: weight min(r, cap) (cap null: weight 1, no correction).
    `mode=mask`: weight 1 where mask_low <= r <= mask_high, else 0 (left out, counted)."""

    level: str = "token"
    mode: str = "truncate"
    cap: float | None = 1.0  # truncate's cap c; 1.0 only ever down-weights; null = no correction
    mask_low: float = 0.5
    mask_high: float = 2.0

    def __post_init__(self) -> None:
        check_choice("importance.level", self.level, IMPORTANCE_LEVELS)
        check_choice("importance.mode", self.mode, IMPORTANCE_MODES)
        check_range("importance.cap", self.cap, POSITIVE, nullable=True, note="null = no correction")
        check_range("importance.mask_low", self.mask_low, Range(0, 1))
        check_range("importance.mask_high", self.mask_high, Range(1))

    @property
    def corrects(self) -> bool:
        return self.mode == "mask" or self.cap is not None
