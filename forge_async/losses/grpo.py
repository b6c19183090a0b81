"""GRPO's policy-gradient loss over packed episodes, with importance correction or PPO clipping.

    loss = - sum_{i,t} mask_it * s_it * w_it * A_it * log pi_theta(y_it)
           + beta * sum_{i,t} mask_it * s_it * k3_it          (with a reference_kl scorer)

Advantages are computed before the batch reaches the trainer (forge_async/scoring/):
A_it is episode i's group-relative advantage, the same for each of its response
tokens, plus the per-token advantage a scorer gave (distillation's
log pi_teacher - log pi_student). The scale s_it is the
aggregation (`token_scale`: token mean, sequence mean or a constant), computed
from counts over the *global* batch, so data-parallel ranks that each hold a
slice of it and sum their gradients get exactly the full-batch gradient.

With clipping (`clipped_surrogate_loss`), the per-token objective is PPO's
min(r A, clip(r, 1 - low, 1 + high) A) with r = pi_theta / pi_behaviour, in place
of w * A * log pi_theta.

With `loss.entropy_coef` = c > 0, the loss also gets - c * sum_{i,t} s_it * H_it, H_it the
entropy of the next-token distribution at response token t (`entropy_bonus`).

Off-policy correction (importance.*): the tokens were sampled by the generator's
weights (pi_behaviour, whose logprobs it recorded), possibly a few versions old or
mixed within a sequence. Each token is weighted by w, a constant in the gradient
(detached): the ratio r = pi_theta / pi_behaviour (per token, or per sequence)
truncated at the cap, w = min(r, cap), or masked, w = 1 inside [mask_low, mask_high]
and 0 outside; with no correction (cap null), w = 1.

KL penalty to a frozen reference policy (scorer kind reference_kl, coefficient beta):
k3_it = exp(d) - d - 1 with d = log pi_ref(y_it) - log pi_theta(y_it), Schulman's
non-negative estimator, differentiated through pi_theta. Its value, with y ~ pi_theta, is an
unbiased estimate of KL(pi_theta || pi_ref); its gradient is not that KL's: with
r = pi_ref / pi_theta, grad k3 = (1 - r) grad log pi_theta, and
E_{y~pi_theta}[(1 - r) grad log pi_theta] = sum_y (grad pi_theta - pi_ref grad log pi_theta)
= - E_{y~pi_ref}[grad log pi_theta] = grad KL(pi_ref || pi_theta). So the term minimises the
forward KL(pi_ref || pi_theta), as in DeepSeekMath's GRPO (docs/scoring.md#reference-kl).
"""

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from forge_async.data.batch import TrainBatch
from forge_async.losses.config import ImportanceConfig
from forge_async.losses import sliced_softmax
from forge_async.losses.kept_softmax import KeptIds

# A ratio counts as truncated only beyond float noise: with cap 1 and identical
# policies, ratios of 1 +- 1e-7 are not truncation.
_TRUNCATION_TOLERANCE = 1e-5


def response_logprobs(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0, whole_grad: bool = False
) -> sliced_softmax.Sampled:
    """log p of each response token of the batch and the entropy of its next-token distribution,
    p the distribution the generator sampled from (the logits / `temperature`, over the token's
    kept set where it has one), from one forward of its rows; and both over the whole vocabulary:
    four [B, W] fp32 tensors, the first two differentiable, the third with `whole_grad` (the softmax
    over the vocabulary is taken a slice of tokens at a time: losses/sliced_softmax.py)."""
    sampled = sliced_softmax.sampled_logprobs_and_entropy(
        *_response_logits(model, batch), distribution=sampling_distribution(batch, temperature), whole_grad=whole_grad
    )
    return sliced_softmax.Sampled(*(t.view_as(batch.logit_index) for t in sampled))


def sampling_distribution(batch: TrainBatch, temperature: float) -> sliced_softmax.Distribution:
    """The distribution each response token was sampled from, as the sliced softmax takes it."""
    tokens, ids = batch.kept_tokens, batch.kept_ids  # both or neither (data/batch.py, _packed_kept_sets)
    kept = None if tokens is None or ids is None else KeptIds(tokens, ids)
    return sliced_softmax.Distribution(temperature, kept)


def _response_logits(model: torch.nn.Module, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward of the batch's rows: its outputs flattened [R * L, V], and which of them
    predicts each response token, with that token (both flattened [B * W])."""
    logits = model(batch.tokens, batch.positions, batch.attention_mask)
    return logits.flatten(0, 1), batch.logit_index.flatten(), batch.targets.flatten()


def sampled_logprobs(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p of each target token, from distributions over the vocabulary [..., V]: shape [...]."""
    return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def frozen_logprobs(model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0) -> torch.Tensor:
    """log p of each response token under a model that is not trained (a reference, a teacher),
    p the softmax of its logits / `temperature` over the whole vocabulary: a reference's and a
    teacher's terms compare whole distributions, whatever the sampler kept (docs/loss.md): [B, W]."""
    distribution = sliced_softmax.Distribution(temperature)
    return sliced_softmax.sampled_logprobs(*_response_logits(model, batch), distribution=distribution).view_as(
        batch.logit_index
    )


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(tokens[:, t+1] | tokens[:, :t+1]) for every t of causal rows: shape [B, L-1], fp32."""
    return sampled_logprobs(F.log_softmax(logits[:, :-1].float(), dim=-1), tokens[:, 1:])


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, sequences: list[list[int]], pad_id: int, device) -> list[list[float]]:
    """log p(token t | tokens < t) for t >= 1 of each sequence under `model`, in one right-padded forward."""
    tokens = torch.full((len(sequences), max(map(len, sequences))), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        tokens[row, : len(seq)] = torch.tensor(seq)
    tokens = tokens.to(device)
    logprobs = token_logprobs(model(tokens), tokens).cpu()
    return [logprobs[row, : len(seq) - 1].tolist() for row, seq in enumerate(sequences)]


@dataclass
class OffPolicySums:
    """Per-rank sums over response tokens; all-reduce them, then call `summary`."""

    tokens: torch.Tensor
    weight: torch.Tensor
    weight_sq: torch.Tensor
    weight_max: torch.Tensor
    truncated: torch.Tensor  # weights the cap cut down
    masked: torch.Tensor  # tokens left out by importance.mode=mask
    mismatch_kl: torch.Tensor
    mismatch_kl_unmasked: torch.Tensor  # the same against the trainer's logprobs over the whole vocabulary
    log_ratio_max: torch.Tensor  # the largest |log r| of a response token (reduced by max)
    clipped: torch.Tensor  # cut off by the PPO clip
    reference_kl: torch.Tensor  # k3 estimate of KL(pi_theta || pi_ref) (0 without a reference)

    def __add__(self, other: "OffPolicySums") -> "OffPolicySums":
        """The sums over both sets of tokens (micro-batches of one step)."""
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        for name in MAXED:
            summed[name] = torch.maximum(getattr(self, name), getattr(other, name))
        return OffPolicySums(**summed)

    def as_tensor(self) -> torch.Tensor:
        """The summed fields, in `summary`'s order."""
        return torch.stack([getattr(self, name) for name in SUMMED])

    def maxima(self) -> torch.Tensor:
        """The fields reduced by max (MAXED), in `summary`'s order."""
        return torch.stack([getattr(self, name).detach().float() for name in MAXED])

    @staticmethod
    def summary(summed: torch.Tensor, maxima: torch.Tensor) -> dict[str, float]:
        totals = dict(zip(SUMMED, summed.tolist()))
        weight_max, log_ratio_max = maxima.tolist()
        tokens = max(totals["tokens"], 1.0)
        weight, weight_sq = totals["weight"], totals["weight_sq"]
        return {
            "is/weight_mean": weight / tokens,
            "is/weight_max": weight_max,
            "is/truncated_frac": totals["truncated"] / tokens,
            "is/masked_frac": totals["masked"] / tokens,
            # Kish effective sample size of the token weights, as a fraction of the tokens.
            "is/ess_frac": weight**2 / (tokens * weight_sq) if weight_sq > 0 else 1.0,
            "is/mismatch_kl": totals["mismatch_kl"] / tokens,
            "is/mismatch_kl_unmasked": totals["mismatch_kl_unmasked"] / tokens,
            # On identical weights every ratio is 1: this is the float noise (tests/test_identity.py).
            "is/log_ratio_max": log_ratio_max,
            "train/clip_frac": totals["clipped"] / tokens,
            "kl/reference": totals["reference_kl"] / tokens,
        }


MAXED = ("weight_max", "log_ratio_max")
SUMMED = tuple(f.name for f in fields(OffPolicySums) if f.name not in MAXED)


def importance_ratios(log_ratio: torch.Tensor, level: str) -> torch.Tensor:
    """pi_theta / pi_behaviour per token, or per sequence (exp of the sum of its token
    log-ratios, shared by its tokens; the sum is bounded at +-50 so the ratio stays finite)."""
    if level == "token":
        return torch.exp(log_ratio)
    return torch.exp(log_ratio.sum(dim=1, keepdim=True).clamp(-50, 50)).expand_as(log_ratio)


def importance_weights(
    logprobs: torch.Tensor, batch: TrainBatch, importance: ImportanceConfig, unmasked: torch.Tensor | None = None
) -> tuple[torch.Tensor, OffPolicySums]:
    """Detached token weights (truncated or masked ratios, see ImportanceConfig) and their statistics;
    `unmasked`: the logprobs over the whole vocabulary, where `logprobs` are over kept sets."""
    mask = batch.response_mask
    zero = torch.zeros((), device=mask.device)
    log_ratio = (logprobs.detach() - batch.behaviour_logprobs) * mask
    unmasked_ratio = log_ratio if unmasked is None else (unmasked.detach() - batch.behaviour_logprobs) * mask
    ratio = importance_ratios(log_ratio, importance.level)
    truncated = masked = zero
    if importance.mode == "mask":
        kept = ((ratio >= importance.mask_low) & (ratio <= importance.mask_high)).float()
        weights, masked = kept, ((1 - kept) * mask).sum()
    elif importance.cap is not None:
        weights = ratio.clamp(max=importance.cap)
        truncated = ((ratio > importance.cap * (1 + _TRUNCATION_TOLERANCE)) * mask).sum()
    else:
        weights = torch.ones_like(ratio)
    weights = weights * mask
    sums = OffPolicySums(
        tokens=mask.sum(),
        weight=weights.sum(),
        weight_sq=(weights**2).sum(),
        weight_max=(ratio * mask).max() if mask.any() else torch.ones((), device=mask.device),
        truncated=truncated,
        masked=masked,
        mismatch_kl=_k3(log_ratio, mask),
        mismatch_kl_unmasked=_k3(unmasked_ratio, mask),
        log_ratio_max=log_ratio.abs().max() if mask.any() else zero,
        clipped=zero,
        reference_kl=zero,
    )
    return weights, sums


def _k3(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Summed k3 estimates of KL(pi_behaviour || pi_theta) on tokens sampled from pi_behaviour."""
    return ((torch.exp(log_ratio) - 1 - log_ratio) * mask).sum()


def token_scale(
    mask: torch.Tensor, aggregation: str, num_sequences: int, num_tokens: int, max_tokens: int | None = None
) -> torch.Tensor:
    """Each response token's share of the loss, [B, W]; counts are of the global batch.

    token_mean: 1 / num_tokens. sequence_mean: 1 / (its sequence's length * num_sequences).
    constant: 1 / (num_sequences * max_tokens), the same whatever the lengths (Dr.GRPO).
    """
    if aggregation == "token_mean":
        scale = torch.full_like(mask, 1.0 / max(num_tokens, 1))
    elif aggregation == "sequence_mean":
        lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
        scale = (1.0 / (lengths * num_sequences)).expand_as(mask)
    elif aggregation == "constant":
        if max_tokens is None:
            raise ValueError("constant aggregation needs max_tokens (loss.max_tokens)")
        scale = torch.full_like(mask, 1.0 / (num_sequences * max_tokens))
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    return scale * mask


def policy_gradient_loss(
    logprobs: torch.Tensor, batch: TrainBatch, scale: torch.Tensor | float, weights: torch.Tensor
) -> torch.Tensor:
    """- sum A_it * w_it * log pi(y_it) * s_it over response tokens (`scale`: `token_scale`'s, or 1/N)."""
    per_token = -batch.advantages * weights * logprobs * batch.response_mask
    return (per_token * scale).sum()


def entropy_bonus(entropy: torch.Tensor, scale: torch.Tensor, coef: float) -> torch.Tensor:
    """- coef * sum_{i,t} s_it * H_it over response tokens (`entropy`: `response_logprobs`'s, `scale`:
    `token_scale`'s). Added to the loss, it pulls each next-token distribution towards uniform."""
    return -coef * (entropy * scale).sum()


def clipped_surrogate_loss(
    logprobs: torch.Tensor, batch: TrainBatch, scale: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped objective against the behaviour policy; returns the loss and how many
    response tokens the clip cut off (their gradient is zero)."""
    mask = batch.response_mask
    ratio = torch.exp((logprobs - batch.behaviour_logprobs) * mask)
    advantages = batch.advantages
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * advantages
    loss = -(torch.minimum(unclipped, clipped) * scale * mask).sum()
    cut = ((clipped < unclipped) * mask).sum().detach()
    return loss, cut


def reference_kl(logprobs: torch.Tensor, batch: TrainBatch) -> torch.Tensor:
    """k3_it = exp(d) - d - 1, d = log pi_ref - log pi_theta, per token ([B, W], 0 outside the
    response): >= 0, and exactly 0 where the policy agrees with the reference. Its mean estimates
    KL(pi_theta || pi_ref), but its expected gradient through pi_theta is that of
    KL(pi_ref || pi_theta) (the module's docstring derives it): the loss minimises the latter."""
    d = (batch.reference_logprobs - logprobs) * batch.response_mask
    return (torch.exp(d) - d - 1) * batch.response_mask
