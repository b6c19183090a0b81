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
temperature and, where a token carries the set of ids its sampler kept (top-k / top-p / min-p,
data/kept_sets.py), every other logit masked out before the softmax ("keep sampling mask").
Masked logits get no gradient. Each token's log-probability over the whole vocabulary comes
back beside it, without gradient, for the metrics.
"""

from collections.abc import Iterator
from typing import NamedTuple

import torch

# Elements of one slice's [tokens, vocabulary] fp32 tensors (128 MiB each): 220 tokens at
# Qwen3's vocabulary; a small vocabulary's (the tiny models') micro-batch is one slice.
SLICE_ELEMENTS = 2**25


class KeptIds(NamedTuple):
    """The kept sets of the chosen tokens: `tokens` [K] int64, which chosen token (the k of
    `index[k]`, ascending) each id belongs to, and `ids` [K] int64, the kept vocabulary ids.
    A chosen token with no ids here has no set: the whole vocabulary."""

    tokens: torch.Tensor
    ids: torch.Tensor


class Sampled(NamedTuple):
    """What `sampled_logprobs_and_entropy` gives, each [K] fp32."""

    logprobs: torch.Tensor  # log p of each chosen token, p over its kept set
    entropy: torch.Tensor  # the entropy of that p
    unmasked: torch.Tensor  # log p over the whole vocabulary (no gradient; the logprobs where no set)


class Distribution(NamedTuple):
    """How the chosen outputs' logits become the distribution the generator sampled from."""

    temperature: float = 1.0
    kept: KeptIds | None = None


UNTRUNCATED = Distribution()  # the logits' own softmax over the whole vocabulary


class _SampledLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, index, targets, slice_tokens: int, distribution: Distribution):
        logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
        entropy, unmasked = torch.empty_like(logprobs), torch.empty_like(logprobs)
        for rows, z, masked in _slices(logits, index, slice_tokens, distribution):
            chosen = z.gather(-1, targets[rows, None]).squeeze(-1)
            unmasked[rows] = chosen - z.logsumexp(-1)
            if masked is not None:
                z.masked_fill_(masked, -torch.inf)
            log_p = z.log_softmax(-1)
            logprobs[rows] = log_p.gather(-1, targets[rows, None]).squeeze(-1)
            entropy[rows] = _entropy(log_p, masked)
        ctx.save_for_backward(logits, index, targets, entropy)
        ctx.slice_tokens, ctx.distribution = slice_tokens, distribution
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, not zeros
        ctx.mark_non_differentiable(unmasked)
        return logprobs, entropy, unmasked

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None, _grad_unmasked=None):
        """d log p_y / dz = onehot(y) - p and dH / dz = -p (log p + H): with a and b the gradients
        of the log-probability and the entropy, dz = onehot(y) a - p (a + b (log p + H)),
        formed in place in at most two [slice, vocabulary] buffers; then / temperature, and 0 at
        masked logits (p = 0 there)."""
        logits, index, targets, entropy = ctx.saved_tensors
        temperature = ctx.distribution.temperature
        grad = torch.zeros_like(logits)
        for rows, g, masked in _slices(logits, index, ctx.slice_tokens, ctx.distribution):
            if masked is not None:
                g.masked_fill_(masked, -torch.inf)
            g = g.log_softmax(-1)
            p = g.exp()
            if masked is not None:
                g.masked_fill_(masked, 0.0)  # log p there is -inf, and p 0: their product 0
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
            if temperature != 1:
                g.div_(temperature)
            grad.index_put_((index[rows],), g.to(grad.dtype), accumulate=True)  # padding repeats an index
        return grad, None, None, None, None


def _slices(
    logits: torch.Tensor, index: torch.Tensor, slice_tokens: int, distribution: Distribution
) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor | None]]:
    """Each slice of `index`; the logits it chooses, in fp32 and divided by the temperature (a
    fresh tensor, free to change in place); and which of them its tokens' kept sets leave out
    (None: none)."""
    for start in range(0, index.numel(), slice_tokens):
        rows = slice(start, min(start + slice_tokens, index.numel()))
        z = logits[index[rows]].float()
        if distribution.temperature != 1:
            z.div_(distribution.temperature)
        masked = _masked(distribution.kept, rows, z.shape) if distribution.kept is not None else None
        yield rows, z, masked


def _masked(kept: KeptIds, rows: slice, shape: torch.Size) -> torch.Tensor | None:
    """[slice, vocabulary] bool: True at the ids outside the kept sets of the slice's tokens that
    have one; None when no token of the slice has a set."""
    low, high = _bounds(kept.tokens, rows)
    if low == high:
        return None
    tokens, ids = kept.tokens[low:high] - rows.start, kept.ids[low:high]
    with_set = torch.zeros(shape[0], dtype=torch.bool, device=tokens.device)
    with_set[tokens] = True
    masked = with_set[:, None].expand(shape).clone()
    masked.view(-1)[tokens * shape[1] + ids] = False  # one flat index: several times faster than two
    return masked


def _bounds(tokens: torch.Tensor, rows: slice) -> tuple[int, int]:
    """Where the ids of the slice's tokens start and end in `tokens` (ascending)."""
    if tokens.device.type == "cpu":  # no tensor round trip for two numbers
        return int(torch.searchsorted(tokens, rows.start)), int(torch.searchsorted(tokens, rows.stop))
    bounds = torch.tensor([rows.start, rows.stop], device=tokens.device)
    low, high = torch.searchsorted(tokens, bounds).tolist()
    return low, high


def _entropy(log_p: torch.Tensor, masked: torch.Tensor | None) -> torch.Tensor:
    """The entropy of each row's distribution; masked entries (log p = -inf, p = 0) add nothing."""
    terms = log_p.exp() * (log_p if masked is None else log_p.masked_fill(masked, 0.0))
    return terms.sum(-1).neg_()


def token_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each distribution given by its log-probabilities over the last dimension."""
    return -(log_probs.exp() * log_probs).sum(-1)


def sampled_logprobs_and_entropy(
    logits: torch.Tensor,
    index: torch.Tensor,
    targets: torch.Tensor,
    slice_tokens: int | None = None,
    distribution: Distribution = UNTRUNCATED,
) -> Sampled:
    """log p(targets[k]) and the entropy of p, where p = softmax(logits[index[k]] / temperature)
    in fp32 over the kept set of token k (`distribution`): `logits` [N, V] (any float dtype),
    `index` and `targets` [K] int64 -> [K] fp32 tensors, the first two differentiable with respect
    to `logits`. `slice_tokens`: tokens per slice (default: SLICE_ELEMENTS' worth)."""
    return Sampled(
        *_SampledLogSoftmax.apply(logits, index, targets, slice_tokens or _default_slice(logits), distribution)
    )


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
    logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
    for rows, z, masked in _slices(logits, index, slice_tokens or _default_slice(logits), distribution):
        if masked is not None:
            z.masked_fill_(masked, -torch.inf)
        logprobs[rows] = z.log_softmax(-1).gather(-1, targets[rows, None]).squeeze(-1)
    return logprobs


def _default_slice(logits: torch.Tensor) -> int:
    return max(1, SLICE_ELEMENTS // logits.shape[-1])
