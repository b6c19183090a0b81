"""Truncated importance sampling: gradient against a hand-computed reference, identity at on-policy."""

import math

import pytest
import torch

from forge_async.data.batch import pack_episodes
from forge_async.data.episode import Completion, Episode
from forge_async.losses.config import ImportanceConfig
from forge_async.losses.grpo import (
    importance_weights,
    policy_gradient_loss,
    response_logprobs,
    token_logprobs,
)
from forge_async.models.titan import build_titan_model, state_dict_adapter

pytestmark = pytest.mark.unit

PAD = 10
SEQUENCES = [([11, 3, 1, 4, 13], [4, 12]), ([11, 9, 2, 6, 13], [9, 5, 12]), ([11, 0, 5, 5, 13], [5])]
ADVANTAGES = [1.0, -0.5, 2.0]


def load(checkpoint, perturb_seed: int | None = None):
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(checkpoint.load_hf_state_dict()))
    if perturb_seed is not None:  # "older weights": a nearby, different policy
        generator = torch.Generator().manual_seed(perturb_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model


def episodes_from(behaviour_model) -> list[Episode]:
    """Episodes whose recorded logprobs come from `behaviour_model`."""
    episodes = []
    for (prompt, response), advantage in zip(SEQUENCES, ADVANTAGES):
        tokens = torch.tensor([prompt + response])
        with torch.no_grad():
            lp = token_logprobs(behaviour_model(tokens), tokens)[0, len(prompt) - 1 :].tolist()
        completion = Completion(prompt, response, lp, [0] * len(response), "", "stop")
        episodes.append(Episode(completion, reward=0.0, advantage=advantage))
    return episodes


@pytest.mark.parametrize("cap", [2.0, 1.05])
def test_gradient_matches_hand_computed_reference(tiny_checkpoint, cap):
    behaviour = load(tiny_checkpoint, perturb_seed=1)
    model = load(tiny_checkpoint)
    batch = pack_episodes(episodes_from(behaviour), PAD)
    n_tokens = batch.num_response_tokens

    logprobs = response_logprobs(model, batch)[0]
    weights, sums = importance_weights(logprobs, batch, ImportanceConfig(cap=cap))
    policy_gradient_loss(logprobs, batch, 1 / n_tokens, weights).backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters()}

    # Reference: sum over response tokens of -A * min(exp(lp - lp_b), cap) / N * grad(lp),
    # one autograd call per token, weights computed with plain floats.
    reference = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    truncated = 0
    for (prompt, response), advantage, episode in zip(SEQUENCES, ADVANTAGES, episodes_from(behaviour)):
        tokens = torch.tensor([prompt + response])
        for t, behaviour_lp in enumerate(episode.completion.logprobs):
            model.zero_grad()
            lp = token_logprobs(model(tokens), tokens)[0, len(prompt) - 1 + t]
            ratio = math.exp(lp.item() - behaviour_lp)
            truncated += ratio > cap
            lp.backward()
            for name, p in model.named_parameters():
                reference[name] -= advantage * min(ratio, cap) / n_tokens * p.grad
    worst = max((got[k] - reference[k]).abs().max().item() for k in got)
    assert worst < 1e-6
    assert max(g.abs().max().item() for g in got.values()) > 1e-4  # not vacuous
    assert sums.truncated.item() == truncated
    if cap < 1.1:
        assert truncated > 0  # the cap really bites in this case


@pytest.mark.parametrize("cap", [1.0, 2.0])
def test_identical_policies_give_unit_weights(tiny_checkpoint, cap):
    model = load(tiny_checkpoint)
    batch = pack_episodes(episodes_from(model), PAD)
    with torch.no_grad():
        logprobs = response_logprobs(model, batch)[0]
    weights, sums = importance_weights(logprobs, batch, ImportanceConfig(cap=cap))
    mask = batch.response_mask.bool()
    assert torch.allclose(weights[mask], torch.ones(int(mask.sum())), atol=1e-6)
    assert (weights[~mask] == 0).all()
    assert sums.truncated.item() == 0
    assert abs(sums.mismatch_kl.item()) < 1e-10
    assert abs(sums.weight.item() - mask.sum().item()) < 1e-5
