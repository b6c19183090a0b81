"""Rows that pack a prompt's responses behind it give each response exactly the logprobs and
the gradient it has in a row of its own."""

import pytest
import torch

from forge_async.data.batch import pack_episodes, prompt_rows
from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.losses.config import ImportanceConfig
from forge_async.losses.grpo import importance_weights, policy_gradient_loss, response_logprobs
from forge_async.models.titan import build_titan_model

pytestmark = pytest.mark.unit

PAD = 10
PROMPTS = [[11, 3, 1, 4, 13], [11, 9, 2, 6, 7, 13]]
RESPONSES = [[4, 12], [9, 5, 12], [5], [1, 2, 3, 12]]  # uneven lengths: padding inside shared rows
TOKEN_COST = 512.0  # the tiny shape's: every group below shares its row


def episodes() -> list[Episode]:
    """Two prompts with four responses each, interleaved as a buffer hands them out; one is a
    multi-turn response whose environment tokens are masked."""
    made = []
    for i in range(8):
        prompt, response = PROMPTS[i % 2], RESPONSES[i // 2]
        versions = [0] * len(response)
        if i == 7:
            versions[1:3] = [ENV_TOKEN, ENV_TOKEN]
        completion = Completion(prompt, response, [-1.0] * len(response), versions, "", "stop")
        made.append(Episode(completion, reward=0.0, advantage=1.0 - 0.3 * i))
    return made


@pytest.fixture(params=["qwen3", "llama"])
def model(request, tiny_checkpoint, tiny_llama_checkpoint):
    checkpoint = tiny_checkpoint if request.param == "qwen3" else tiny_llama_checkpoint
    torch.manual_seed(0)
    return build_titan_model(checkpoint.shape, seed=1)


def logprobs_and_gradient(
    model, episodes: list[Episode], token_cost: float | None
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    batch = pack_episodes(episodes, PAD, token_cost)
    model.zero_grad()
    logprobs = response_logprobs(model, batch)[0]
    weights, _ = importance_weights(logprobs, batch, ImportanceConfig())
    policy_gradient_loss(logprobs, batch, 1 / batch.num_response_tokens, weights).backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters()])
    return (logprobs * batch.response_mask).detach(), gradient, list(batch.tokens.shape)


def test_shared_rows_give_the_logprobs_and_gradient_of_rows_of_their_own(model):
    by_row = [e for row in prompt_rows(episodes(), TOKEN_COST) for e in row]  # the shared batch's order
    alone, alone_gradient, alone_shape = logprobs_and_gradient(model, by_row, token_cost=None)
    shared, shared_gradient, shared_shape = logprobs_and_gradient(model, episodes(), TOKEN_COST)
    assert alone_shape == [8, 10] and shared_shape == [2, 16]  # 80 tokens of forward, 32 shared
    assert shared.shape == alone.shape == (8, 4)
    assert torch.allclose(shared, alone, atol=1e-5), (shared - alone).abs().max()
    assert alone.abs().sum() > 1.0  # real logprobs, not zeros
    assert torch.allclose(shared_gradient, alone_gradient, atol=1e-6), (shared_gradient - alone_gradient).abs().max()
    assert alone_gradient.abs().max() > 1e-4


def test_a_response_does_not_see_the_others_in_its_row(model):
    batch = pack_episodes(episodes(), PAD, TOKEN_COST)
    with torch.no_grad():
        before = response_logprobs(model, batch)[0]
        changed = batch.tokens.clone()
        changed[0, 5:7] = torch.tensor([7, 7])  # the first prompt's first response (episode 0)
        batch.tokens = changed
        after = response_logprobs(model, batch)[0]
    assert not torch.allclose(before[0, 1:], after[0, 1:])  # the changed response sees its change
    assert torch.equal(before[1:], after[1:])  # no other response does


@pytest.mark.parametrize("checkpointing", ["full", "selective"])
def test_activation_checkpointing_recomputes_shared_rows_under_their_mask(tiny_checkpoint, checkpointing):
    """The mask and positions reach the recomputed blocks (TorchTitan's AC, as the trainer applies it)."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    torch.manual_seed(0)
    plain = build_titan_model(tiny_checkpoint.shape, seed=1)
    checkpointed = build_titan_model(tiny_checkpoint.shape, seed=1)
    ac = FullAC(FullAC.Config()) if checkpointing == "full" else SelectiveAC(SelectiveAC.Config())
    ac.apply(checkpointed)
    by_row = [e for row in prompt_rows(episodes(), TOKEN_COST) for e in row]
    _, alone_gradient, _ = logprobs_and_gradient(plain, by_row, token_cost=None)
    _, shared_gradient, _ = logprobs_and_gradient(checkpointed, episodes(), TOKEN_COST)
    assert torch.allclose(shared_gradient, alone_gradient, atol=1e-6), (shared_gradient - alone_gradient).abs().max()


def test_an_empty_response_packs_to_a_masked_row():
    empty = Episode(Completion(PROMPTS[0], [], [], [], "", "length"), reward=0.0, advantage=1.0)
    batch = pack_episodes([empty, *episodes()[:2]], PAD, TOKEN_COST)
    assert batch.response_mask.shape == (3, 2)  # [empty, episode 0] share a row, then episode 1
    assert batch.response_mask[0].sum() == 0 and batch.response_mask[1:].sum() == 4
