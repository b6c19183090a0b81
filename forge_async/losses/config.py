"""The loss's config section (light: read before torch is imported). Formulas: docs/loss.md."""

from dataclasses import dataclass
from typing import Literal

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_range
from forge_async.errors import ConfigError

# grpo: the policy-gradient loss on sampled, scored episodes (losses/grpo.py; apps.grpo, apps.distill);
# sft: the negative log-likelihood of demonstrations (losses/sft.py; apps.sft sets it).


@dataclass
class LossConfig:
    objective: Literal["grpo", "sft"] = key(
        "grpo",
        help=(
            "`grpo`: the policy-gradient loss below (apps.grpo and apps.distill accept nothing else). "
            "`sft`: the mean negative log-likelihood of demonstration tokens, what `python -m apps.sft` "
            "trains with (its `configs/sft.yaml` sets it, and it accepts nothing else; [sft.md](sft.md)); "
            "of the keys below it reads `aggregation` and `entropy_coef`, and refuses "
            "`clip_low`/`clip_high`"
        ),
    )
    aggregation: Literal["token_mean", "sequence_mean", "constant"] = key(
        "token_mean",
        help=(
            "how token terms are averaged: over the batch's response tokens (DAPO), per sequence then "
            "over sequences (GRPO), or over a constant `sequences x loss.max_tokens` (Dr.GRPO)"
        ),
    )
    scale_by_std: bool = key(
        True,
        help="advantages `(r - mean) / std` of the group; false: `r - mean` (Dr.GRPO)",
    )
    clip_low: float | None = key(
        None,
        help=(
            "PPO clip of the ratio to the behaviour policy, to `[1 - clip_low, 1 + clip_high]` (clip-higher: "
            "`clip_high > clip_low`); null = off. Set with `clip_high`; needs `importance.cap=null` (mode `truncate`)"
        ),
        accepts="in (0, 1), or null",
    )
    clip_high: float | None = key(
        None, help="the upper clip of the ratio (see `loss.clip_low`); set with `clip_low`", accepts="> 0, or null"
    )
    max_tokens: int | None = key(
        None,
        help=(
            "tokens per sequence of the `constant` aggregation; null = `sampling.max_tokens` (multi-turn: "
            "times `env.max_turns`)"
        ),
        accepts=">= 1, or null",
    )
    entropy_coef: float = key(
        0.0,
        help=(
            "entropy bonus: minus this times the aggregated entropy of the response tokens' next-token "
            "distributions; 0 = off"
        ),
        accepts=">= 0",
    )

    def __post_init__(self) -> None:
        check_choices(self, "loss")
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

    @property
    def clip(self) -> tuple[float, float] | None:
        """(clip_low, clip_high) when the ratio is clipped (both are set, or neither)."""
        return None if self.clip_low is None or self.clip_high is None else (self.clip_low, self.clip_high)


@dataclass
class ImportanceConfig:
    """Off-policy correction of the policy-gradient loss, by the ratio r = pi_theta / pi_behaviour
    (formulas: docs/loss.md)."""

    level: Literal["token", "sequence"] = key(
        "token",
        help=("the ratio pi_theta / pi_behaviour per token, or per sequence (exp of the sum of its token log-ratios)"),
    )
    mode: Literal["truncate", "mask"] = key(
        "truncate",
        help=(
            "`truncate`: weight min(ratio, cap); `mask`: weight 1 inside `[mask_low, mask_high]`, 0 "
            "outside (left out of the loss, `is/masked_frac`)"
        ),
    )
    cap: float | None = key(
        1.0,
        help=(
            "truncation cap; 1.0 only ever down-weights; null = no correction "
            "([staleness.md](staleness.md)). Was `trainer.is_cap`: runs saved with it resume with it here"
        ),
        accepts="> 0, or null",
    )
    mask_low: float = key(0.5, help="mode `mask`: the lowest ratio kept", accepts="in [0, 1]")
    mask_high: float = key(2.0, help="mode `mask`: the highest ratio kept", accepts=">= 1")

    def __post_init__(self) -> None:
        check_choices(self, "importance")
        check_range("importance.cap", self.cap, POSITIVE, nullable=True, note="null = no correction")
        check_range("importance.mask_low", self.mask_low, Range(0, 1))
        check_range("importance.mask_high", self.mask_high, Range(1))

    @property
    def corrects(self) -> bool:
        return self.mode == "mask" or self.cap is not None
