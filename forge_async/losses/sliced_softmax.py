"""The log-probability and entropy of chosen tokens from a forward's logits, the vocabulary's
softmax computed a slice of tokens at a time, forward and backward.

The plain way, log_softmax over every response token of a micro-batch in fp32, makes
[tokens, vocabulary] fp32 tensors: with Qwen3's 151,936-token vocabulary, 12,000 response
tokens take 7.3 GB each, and the forward (the fp32 copy, the log-softmax, the entropy's
terms) and the backward (the gradient of each) hold several at once: most of a GPU
trainer's peak memory (benchmarks/components/gpu_trainer.py). Here the forward keeps
only each token's log-probability and entropy, and the backward recomputes each slice's
softmax to form its gradient, written straight into the logits' gradient. The math is the
plain way's; only the order of the work differs.

The distribution is the one the generator sampled from: the logits divided by the sampling
temperature, and where a token carries the set of ids its sampler kept (top-k / top-p / min-p,
data/kept_sets.py) the softmax over that set alone ("keep sampling mask"), computed on the kept
ids (losses/kept_softmax.py); the other logits get no gradient. Each token's log-probability
and entropy over the whole vocabulary come back beside them, for the metrics and for a KL penalty
to a reference (which is over the whole vocabulary: docs/loss.md).
"""

from collections.abc import Iterator
from typing import NamedTuple

import torch

from forge_async.losses.kept_softmax import KeptIds, kept_logprobs, kept_logprobs_and_entropy

# Elements of one slice's [tokens, vocabulary] fp32 tensors (128 MiB each): 220 tokens at
# Qwen3's vocabulary; a small vocabulary's (the tiny models') micro-batch is one slice.
SLICE_ELEMENTS = 2**25


class Sampled(NamedTuple):
    """What `sampled_logprobs_and_entropy` gives, each [K] fp32."""

    logprobs: torch.Tensor  # log p of each chosen token, p over its kept set where it has one
    entropy: torch.Tensor  # the entropy of that p
    # log p over the whole vocabulary (the logprobs where no set; with a gradient only if asked for)
    unmasked: torch.Tensor
    whole_entropy: torch.Tensor  # the entropy over the whole vocabulary (no gradient)


class Distribution(NamedTuple):
    """How the chosen outputs' logits become the distribution the generator sampled from."""

    temperature: float = 1.0
    kept: KeptIds | None = None


UNTRUNCATED = Distribution()  # the logits' own softmax over the whole vocabulary


class _SampledLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, index, targets, slice_tokens: int, temperature: float):
        logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
        entropy = torch.empty_like(logprobs)
        for rows, log_p in _log_softmax_slices(logits, index, slice_tokens, temperature):
            logprobs[rows] = log_p.gather(-1, targets[rows, None]).squeeze(-1)
            entropy[rows] = log_p.exp().mul_(log_p).sum(-1).neg_()
        ctx.save_for_backward(logits, index, targets, entropy)
        ctx.slice_tokens, ctx.temperature = slice_tokens, temperature
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, not zeros
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        """d log p_y / dz = onehot(y) - p and dH / dz = -p (log p + H): with a and b the gradients
        of the log-probability and the entropy, dz = onehot(y) a - p (a + b (log p + H)),
        formed in place in at most two [slice, vocabulary] buffers; then / temperature."""
        logits, index, targets, entropy = ctx.saved_tensors
        grad = torch.zeros_like(logits)
        for rows, g in _log_softmax_slices(logits, index, ctx.slice_tokens, ctx.temperature):
            p = g.exp()
            if grad_entropy is None:
                g.zero_()
            else:
                g.add_(entropy[rows, None]).mul_(grad_entropy[rows, None])
            if grad_logprobs is not None:
                g.add_(grad_logprobs[rows, None])
            g.mul_(p).neg_()
            del p
            if grad_logprobs is not None:
                g.scatter_add_(-1, targets[rows, None], grad_logprobs[rows, None])
            if ctx.temperature != 1:
                g.div_(ctx.temperature)
            grad.index_put_((index[rows],), g.to(grad.dtype), accumulate=True)  # padding repeats an index
        return grad, None, None, None, None


def _log_softmax_slices(
    logits: torch.Tensor, index: torch.Tensor, slice_tokens: int, temperature: float
) -> Iterator[tuple[slice, torch.Tensor]]:
    """Each slice of `index`, and log p over the vocabulary at the outputs it chooses, in fp32,
    p the softmax of the logits / `temperature`."""
    for start in range(0, index.numel(), slice_tokens):
        rows = slice(start, min(start + slice_tokens, index.numel()))
        z = logits[index[rows]].float()
        yield rows, (z.div_(temperature) if temperature != 1 else z).log_softmax(-1)


def token_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each distribution given by its log-probabilities over the last dimension."""
    return -(log_probs.exp() * log_probs).sum(-1)


def sampled_logprobs_and_entropy(
    logits: torch.Tensor,
    index: torch.Tensor,
    targets: torch.Tensor,
    slice_tokens: int | None = None,
    distribution: Distribution = UNTRUNCATED,
    whole_grad: bool = False,
) -> Sampled:
    """log p(targets[k]) and the entropy of p, where p = softmax(logits[index[k]] / temperature)
    in fp32, over token k's kept set where `distribution` gives one: `logits` [N, V] (any float
    dtype), `index` and `targets` [K] int64 -> [K] fp32 tensors, the first two differentiable with
    respect to `logits`; and both over the whole vocabulary, the log p differentiable too with
    `whole_grad` (a KL penalty to a reference, computed over the whole vocabulary).
    `slice_tokens`: tokens per slice (default: SLICE_ELEMENTS' worth)."""
    slice_tokens = slice_tokens or _default_slice(logits)
    temperature, kept = distribution
    if kept is None or not len(kept.ids):
        logprobs, entropy = _SampledLogSoftmax.apply(logits, index, targets, slice_tokens, temperature)
        return Sampled(logprobs, entropy, logprobs if whole_grad else logprobs.detach(), entropy.detach())
    chosen, set_logprobs, set_entropy = kept_logprobs_and_entropy(logits, index, targets, kept, temperature)
    with torch.set_grad_enabled(whole_grad and torch.is_grad_enabled()):
        chosen_whole = _SampledLogSoftmax.apply(logits, index[chosen], targets[chosen], slice_tokens, temperature)
    logprobs_parts, entropy_parts = [(chosen, set_logprobs)], [(chosen, set_entropy)]
    unmasked_parts, whole_entropy_parts = [(chosen, chosen_whole[0])], [(chosen, chosen_whole[1].detach())]
    whole = _without_set(kept, len(index))
    if len(whole):  # each function's backward makes a gradient the size of the logits: only where needed
        whole_logprobs, whole_entropy = _SampledLogSoftmax.apply(
            logits, index[whole], targets[whole], slice_tokens, temperature
        )
        logprobs_parts.append((whole, whole_logprobs))
        entropy_parts.append((whole, whole_entropy))
        unmasked_parts.append((whole, whole_logprobs if whole_grad else whole_logprobs.detach()))
        whole_entropy_parts.append((whole, whole_entropy.detach()))
    count = len(index)
    return Sampled(
        _placed(count, *logprobs_parts),
        _placed(count, *entropy_parts),
        _placed(count, *unmasked_parts),
        _placed(count, *whole_entropy_parts),
    )


def _without_set(kept: KeptIds, count: int) -> torch.Tensor:
    """The chosen tokens (of `count`) that have no kept set, ascending."""
    has_set = torch.zeros(count, dtype=torch.bool, device=kept.tokens.device)
    has_set[kept.tokens] = True
    return (~has_set).nonzero().squeeze(-1)


def _placed(count: int, *parts: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """[count]: each part's values at its positions (differentiable in the values)."""
    out = torch.zeros(count, dtype=torch.float32, device=parts[0][1].device)
    for positions, values in parts:
        out = out.index_copy(0, positions, values)
    return out


@torch.no_grad()
def sampled_logprobs(
    logits: torch.Tensor,
    index: torch.Tensor,
    targets: torch.Tensor,
    slice_tokens: int | None = None,
    distribution: Distribution = UNTRUNCATED,
) -> torch.Tensor:
    """log p(targets[k]) alone, as `sampled_logprobs_and_entropy` gives it, with no gradient and no
    entropy (a frozen model's: a reference's, a teacher's)."""
    temperature, kept = distribution
    slice_tokens = slice_tokens or _default_slice(logits)
    logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
    if kept is None or not len(kept.ids):
        whole = torch.arange(len(index), device=index.device)
    else:
        whole = _without_set(kept, len(index))
        chosen, set_logprobs = kept_logprobs(logits, index, targets, kept, temperature)
        logprobs[chosen] = set_logprobs
    for rows, log_p in _log_softmax_slices(logits, index[whole], slice_tokens, temperature):
        logprobs[whole[rows]] = log_p.gather(-1, targets[whole[rows], None]).squeeze(-1)
    return logprobs


def _default_slice(logits: torch.Tensor) -> int:
    return max(1, SLICE_ELEMENTS // logits.shape[-1])
