"""The log-probability and entropy of chosen tokens over the sets of ids their sampler kept
(top-k / top-p / min-p: data/kept_sets.py), computed on the kept ids alone.

A token sampled from a truncated distribution has probability exp(z_y) / sum_{i in S} exp(z_i),
S its kept set: only the logits of S enter it, and only they get a gradient. So instead of
masking a [tokens, vocabulary] matrix, this gathers each set's logits (a few to a few hundred a
token, against 151,936 in Qwen3's vocabulary) and does the softmax, its entropy and their
gradients per set, with segment sums over the gathered values: the work and memory follow the
sets' sizes, not the vocabulary's.
"""

from typing import NamedTuple

import torch


class KeptIds(NamedTuple):
    """The kept sets of chosen tokens: `tokens` [E] int64, which chosen token (the k of
    `index[k]`, ascending) each id belongs to, and `ids` [E] int64, the kept vocabulary ids,
    each once per token, the token's own among them."""

    tokens: torch.Tensor
    ids: torch.Tensor


class _Sets(NamedTuple):
    """A batch's kept sets laid out for segment sums."""

    chosen: torch.Tensor  # [T] the chosen tokens that have a set, ascending
    segment: torch.Tensor  # [E] each id's set, 0..T-1
    rows: torch.Tensor  # [E] the forward output each id's logit is read from
    ids: torch.Tensor  # [E]
    is_target: torch.Tensor  # [E] bool, the id its token is


def _sets(kept: KeptIds, index: torch.Tensor, targets: torch.Tensor) -> _Sets:
    chosen, segment = torch.unique_consecutive(kept.tokens, return_inverse=True)
    return _Sets(chosen, segment, index[kept.tokens], kept.ids, kept.ids == targets[kept.tokens])


def _log_p(logits: torch.Tensor, sets: _Sets, temperature: float) -> torch.Tensor:
    """[E] fp32: log p of each kept id, p the softmax of logits / temperature over its set."""
    z = logits[sets.rows, sets.ids].float() / temperature
    count = len(sets.chosen)
    peak = torch.full((count,), -torch.inf, device=z.device).scatter_reduce(0, sets.segment, z, "amax")
    shifted = z - peak[sets.segment]
    total = torch.zeros(count, device=z.device).index_add_(0, sets.segment, shifted.exp())
    return shifted - total.log()[sets.segment]


def _per_set(values: torch.Tensor, sets: _Sets) -> torch.Tensor:
    """[T]: the sum of `values` [E] over each set."""
    return torch.zeros(len(sets.chosen), device=values.device).index_add_(0, sets.segment, values)


class _KeptLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, index, targets, kept: KeptIds, temperature: float):
        sets = _sets(kept, index, targets)
        log_p = _log_p(logits, sets, temperature)
        logprobs = _per_set(log_p * sets.is_target, sets)  # each set holds its target once
        entropy = -_per_set(log_p.exp() * log_p, sets)
        ctx.save_for_backward(log_p, entropy)
        ctx.sets, ctx.temperature, ctx.logits_meta = sets, temperature, (logits.shape, logits.dtype, logits.device)
        ctx.set_materialize_grads(False)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        """Per kept id, as over the whole vocabulary (sliced_softmax.py) with p = 0 outside the
        set: dz = onehot(y) a - p (a + b (log p + H)), then / temperature."""
        log_p, entropy = ctx.saved_tensors
        sets = ctx.sets
        a = grad_logprobs[sets.segment] if grad_logprobs is not None else torch.zeros_like(log_p)
        g = a.clone()
        if grad_entropy is not None:
            g += grad_entropy[sets.segment] * (log_p + entropy[sets.segment])
        g = sets.is_target * a - log_p.exp() * g
        shape, dtype, device = ctx.logits_meta
        grad = torch.zeros(shape, dtype=dtype, device=device)
        grad.index_put_((sets.rows, sets.ids), (g / ctx.temperature).to(dtype), accumulate=True)
        return grad, None, None, None, None


def kept_logprobs_and_entropy(
    logits: torch.Tensor, index: torch.Tensor, targets: torch.Tensor, kept: KeptIds, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the chosen tokens that have a set: which they are (ascending), log p of each and the
    entropy of p, p = softmax(logits[index[k]] / temperature) over the token's kept set; the last
    two [T] fp32, differentiable with respect to `logits`."""
    logprobs, entropy = _KeptLogSoftmax.apply(logits, index, targets, kept, temperature)
    return torch.unique_consecutive(kept.tokens), logprobs, entropy


@torch.no_grad()
def kept_logprobs(
    logits: torch.Tensor, index: torch.Tensor, targets: torch.Tensor, kept: KeptIds, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`kept_logprobs_and_entropy`'s chosen tokens and log p alone, with no gradient."""
    sets = _sets(kept, index, targets)
    return sets.chosen, _per_set(_log_p(logits, sets, temperature) * sets.is_target, sets)
