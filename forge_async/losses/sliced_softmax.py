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
"""

from collections.abc import Iterator

import torch

# Elements of one slice's [tokens, vocabulary] fp32 tensors (128 MiB each): 220 tokens at
# Qwen3's vocabulary; a small vocabulary's (the tiny models') micro-batch is one slice.
SLICE_ELEMENTS = 2**25


class _SampledLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor, targets: torch.Tensor, slice_tokens: int):
        logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
        entropy = torch.empty_like(logprobs)
        for rows, log_p in _log_softmax_slices(logits, index, slice_tokens):
            logprobs[rows] = log_p.gather(-1, targets[rows, None]).squeeze(-1)
            entropy[rows] = log_p.exp().mul_(log_p).sum(-1).neg_()
        ctx.save_for_backward(logits, index, targets, entropy)
        ctx.slice_tokens = slice_tokens
        ctx.set_materialize_grads(False)  # an output the loss does not use gets None, not zeros
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        """d log p_y / dz = onehot(y) - p and dH / dz = -p (log p + H): with a and b the gradients
        of the log-probability and the entropy, dz = onehot(y) a - p (a + b (log p + H)),
        formed in place in at most two [slice, vocabulary] buffers."""
        logits, index, targets, entropy = ctx.saved_tensors
        grad = torch.zeros_like(logits)
        for rows, g in _log_softmax_slices(logits, index, ctx.slice_tokens):
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
            grad.index_put_((index[rows],), g.to(grad.dtype), accumulate=True)  # padding repeats an index
        return grad, None, None, None


def _log_softmax_slices(
    logits: torch.Tensor, index: torch.Tensor, slice_tokens: int
) -> Iterator[tuple[slice, torch.Tensor]]:
    """Each slice of `index`, and log p over the vocabulary at the outputs it chooses, in fp32."""
    for start in range(0, index.numel(), slice_tokens):
        rows = slice(start, min(start + slice_tokens, index.numel()))
        yield rows, logits[index[rows]].float().log_softmax(-1)


def token_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each distribution given by its log-probabilities over the last dimension."""
    return -(log_probs.exp() * log_probs).sum(-1)


def sampled_logprobs_and_entropy(
    logits: torch.Tensor, index: torch.Tensor, targets: torch.Tensor, slice_tokens: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(targets[k]) and the entropy of p, where p = softmax(logits[index[k]]) in fp32:
    `logits` [N, V] (any float dtype), `index` and `targets` [K] int64 -> two [K] fp32 tensors,
    both differentiable with respect to `logits`. `slice_tokens`: tokens per slice (default:
    SLICE_ELEMENTS' worth)."""
    return _SampledLogSoftmax.apply(logits, index, targets, slice_tokens or _default_slice(logits))


@torch.no_grad()
def sampled_logprobs(
    logits: torch.Tensor, index: torch.Tensor, targets: torch.Tensor, slice_tokens: int | None = None
) -> torch.Tensor:
    """log p(targets[k]) alone, as `sampled_logprobs_and_entropy` gives it, with no gradient and no
    entropy (a frozen model's: a reference's, a teacher's)."""
    logprobs = torch.empty(index.shape, dtype=torch.float32, device=logits.device)
    for rows, log_p in _log_softmax_slices(logits, index, slice_tokens or _default_slice(logits)):
        logprobs[rows] = log_p.gather(-1, targets[rows, None]).squeeze(-1)
    return logprobs


def _default_slice(logits: torch.Tensor) -> int:
    return max(1, SLICE_ELEMENTS // logits.shape[-1])
