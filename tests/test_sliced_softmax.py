"""losses/sliced_softmax.py: the chosen tokens' log-probabilities and entropies, and their
gradients, equal the plain fp32 log-softmax's, while nothing of [tokens, vocabulary] fp32 is
kept for the backward."""

import pytest
import torch

from forge_async.losses.kept_softmax import KeptIds
from forge_async.losses.sliced_softmax import (
    Distribution,
    sampled_logprobs,
    sampled_logprobs_and_entropy,
    token_entropy,
)

pytestmark = pytest.mark.unit

N, V = 40, 23  # forward outputs, vocabulary
# 30 chosen outputs, some twice (a padded response column repeats an index), sliced 7 at a time
INDEX = torch.tensor(
    [3, 5, 7, 0, 0, 0, 39, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 1, 2]
)
SLICE = 7


def plain(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_p = logits[INDEX].float().log_softmax(-1)
    return log_p.gather(-1, targets[:, None]).squeeze(-1), token_entropy(log_p)


def gradient(fn, logits: torch.Tensor, targets: torch.Tensor, a: torch.Tensor | None, b: torch.Tensor | None):
    """Values and d/dlogits of sum(a * logprobs) + sum(b * entropy) (a term left out where None)."""
    x = logits.detach().clone().requires_grad_()
    logprobs, entropy = fn(x, targets)
    loss = sum(((w * t).sum() for w, t in ((a, logprobs), (b, entropy)) if w is not None), torch.zeros(()))
    loss.backward()
    return logprobs.detach(), entropy.detach(), x.grad


def sliced(logits: torch.Tensor, targets: torch.Tensor):
    return sampled_logprobs_and_entropy(logits, INDEX, targets, slice_tokens=SLICE)[:2]


@pytest.mark.parametrize("terms", ["logprobs", "entropy", "both"])
def test_values_and_gradients_equal_the_plain_log_softmax(terms):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(N, V, generator=gen) * 3
    targets = torch.randint(0, V, (len(INDEX),), generator=gen)
    a = torch.randn(len(INDEX), generator=gen) if terms in ("logprobs", "both") else None
    b = torch.randn(len(INDEX), generator=gen) if terms in ("entropy", "both") else None
    want = gradient(plain, logits, targets, a, b)
    got = gradient(sliced, logits, targets, a, b)
    for w, g in zip(want, got):
        assert torch.allclose(g, w, atol=1e-6), (g - w).abs().max()
    unchosen = torch.ones(N, dtype=torch.bool)
    unchosen[INDEX] = False
    assert unchosen.sum() == 12 and got[2][unchosen].abs().sum() == 0  # outputs no token chose get none


def test_a_frozen_models_logprobs_equal_the_plain_ones_and_carry_no_graph():
    gen = torch.Generator().manual_seed(2)
    logits = (torch.randn(N, V, generator=gen) * 3).requires_grad_()
    targets = torch.randint(0, V, (len(INDEX),), generator=gen)
    got = sampled_logprobs(logits, INDEX, targets, slice_tokens=SLICE)
    assert not got.requires_grad
    assert torch.allclose(got, plain(logits, targets)[0], atol=1e-6)


def test_bf16_logits_get_a_bf16_gradient_close_to_the_plain_one():
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(N, V, generator=gen) * 3).bfloat16()
    targets = torch.randint(0, V, (len(INDEX),), generator=gen)
    a = torch.randn(len(INDEX), generator=gen)
    want = gradient(plain, logits, targets, a, None)
    got = gradient(sliced, logits, targets, a, None)
    assert got[2].dtype == torch.bfloat16
    assert torch.allclose(got[0], want[0], atol=1e-6)
    assert torch.allclose(got[2].float(), want[2].float(), atol=1e-2)


def saved_shapes(fn, logits: torch.Tensor, targets: torch.Tensor) -> list[tuple[torch.Size, torch.dtype]]:
    shapes = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        shapes.append((t.shape, t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(logits.requires_grad_(), targets)
    return shapes


def test_only_the_logits_and_per_token_vectors_are_kept_for_the_backward():
    logits = torch.randn(N, V).bfloat16()
    targets = torch.randint(0, V, (len(INDEX),))
    chosen_fp32 = (torch.Size([len(INDEX), V]), torch.float32)
    assert chosen_fp32 in saved_shapes(plain, logits, targets)  # the plain way keeps its log-softmax
    kept = saved_shapes(sliced, logits, targets)
    assert chosen_fp32 not in kept
    assert all(shape == logits.shape or len(shape) == 1 for shape, _ in kept), kept


def kept_sets(targets: torch.Tensor, gen: torch.Generator, every: int) -> tuple[KeptIds, torch.Tensor]:
    """Random kept sets holding each target, for every `every`-th chosen token (the rest have none),
    as KeptIds and as the [K, V] bool mask they stand for."""
    allowed = torch.ones(len(INDEX), V, dtype=torch.bool)
    tokens, ids = [], []
    for k, target in enumerate(targets.tolist()):
        if k % every:
            continue
        chosen = sorted({target, *torch.randint(0, V, (k % 5,), generator=gen).tolist()})
        allowed[k] = False
        allowed[k, chosen] = True
        tokens += [k] * len(chosen)
        ids += chosen
    return KeptIds(torch.tensor(tokens), torch.tensor(ids)), allowed


@pytest.mark.parametrize("every", [1, 2], ids=["every token with a set", "every other token"])
def test_kept_sets_and_temperature_give_the_masked_tempered_softmax_and_its_gradients(every):
    """Each token's p over its kept set (every other logit at -inf) of logits / T, computed plainly
    here; masked logits get no gradient; the unmasked logprob is the whole vocabulary's."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(N, V, generator=gen) * 3
    targets = torch.randint(0, V, (len(INDEX),), generator=gen)
    kept, allowed = kept_sets(targets, gen, every)
    temperature = 0.7
    a, b = torch.randn(len(INDEX), generator=gen), torch.randn(len(INDEX), generator=gen)

    def masked_plain(x, t):
        z = x[INDEX].float() / temperature
        log_p = z.masked_fill(~allowed, -torch.inf).log_softmax(-1)
        entropy = -(log_p.exp() * log_p.masked_fill(~allowed, 0.0)).sum(-1)
        return log_p.gather(-1, t[:, None]).squeeze(-1), entropy

    distribution = Distribution(temperature, kept)

    def masked_sliced(x, t):
        return sampled_logprobs_and_entropy(x, INDEX, t, slice_tokens=SLICE, distribution=distribution)[:2]

    want, got = gradient(masked_plain, logits, targets, a, b), gradient(masked_sliced, logits, targets, a, b)
    for w, g in zip(want, got):
        assert torch.allclose(g, w, atol=1e-5), (g - w).abs().max()
    assert (got[1] <= allowed.sum(-1).log() + 1e-6).all()  # at most log(set size): the set bounds it
    # every logit outside a kept set of a chosen token (each output chosen once) gets no gradient
    once = [k for k in range(len(INDEX)) if (INDEX == INDEX[k]).sum() == 1]
    assert all(got[2][INDEX[k]][~allowed[k]].abs().sum() == 0 for k in once)
    unmasked = sampled_logprobs_and_entropy(logits, INDEX, targets, SLICE, distribution).unmasked
    whole = (logits[INDEX] / temperature).log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(unmasked, whole, atol=1e-5)
    assert not torch.allclose(unmasked[::every], got[0][::every])  # a set changes the logprob
    frozen = sampled_logprobs(logits, INDEX, targets, slice_tokens=SLICE, distribution=distribution)
    assert torch.allclose(frozen, want[0], atol=1e-5)


def test_the_whole_vocabulary_logprob_has_a_gradient_where_asked_even_on_a_one_token_set():
    """A reference's KL penalty is over the whole vocabulary (docs/loss.md): with `whole_grad`, the
    unmasked log p carries the plain log-softmax's gradient, also where a token's kept set is the token
    alone (over which log p is 0 and has no gradient); its entropy there is the whole vocabulary's."""
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(N, V, generator=gen) * 3
    targets = torch.randint(0, V, (len(INDEX),), generator=gen)
    kept = KeptIds(torch.arange(0, len(INDEX), 2), targets[::2])  # every other token: its own id alone
    a = torch.randn(len(INDEX), generator=gen)
    distribution = Distribution(0.7, kept)

    def whole(x, t):
        sampled = sampled_logprobs_and_entropy(x, INDEX, t, SLICE, distribution, whole_grad=True)
        return sampled.unmasked, sampled.whole_entropy

    def plain_tempered(x, t):
        log_p = (x[INDEX].float() / 0.7).log_softmax(-1)
        return log_p.gather(-1, t[:, None]).squeeze(-1), token_entropy(log_p)

    want, got = gradient(plain_tempered, logits, targets, a, None), gradient(whole, logits, targets, a, None)
    for w, g in zip(want, got):
        assert torch.allclose(g, w, atol=1e-5), (g - w).abs().max()
    over_sets = sampled_logprobs_and_entropy(logits, INDEX, targets, SLICE, distribution)
    assert torch.equal(over_sets.logprobs[::2], torch.zeros(len(INDEX[::2])))  # the set alone: log 1
    assert (got[0][::2] < -1e-3).all()  # the whole vocabulary's: what a reference is compared with
