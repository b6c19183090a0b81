"""Loss aggregations, advantage scaling and PPO clipping against hand computations on a fixed batch."""

import math

import pytest
import torch

from forge_async.data.batch import TrainBatch
from forge_async.losses.advantages import group_advantages
from forge_async.losses.grpo import clipped_surrogate_loss, policy_gradient_loss, token_scale

# Two sequences, position t of a row predicting a response token where the mask is 1:
# row 0 has 2 response tokens, row 1 has 3.
MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
LOGPROBS = [[0.0, -0.5, -1.0, 0.0], [0.0, -0.2, -0.3, -2.0]]
ADVANTAGES = [1.0, -0.5]


def batch(behaviour: list[list[float]] | None = None) -> TrainBatch:
    return TrainBatch(
        tokens=torch.zeros(2, 5, dtype=torch.long),
        response_mask=MASK,
        behaviour_logprobs=torch.tensor(behaviour) if behaviour else torch.zeros(2, 4),
        versions=torch.zeros(2, 4, dtype=torch.long),
        advantages=torch.tensor(ADVANTAGES),
    )


def loss_for(aggregation: str, max_tokens: int | None = None) -> float:
    logprobs = torch.tensor(LOGPROBS)
    scale = token_scale(MASK, aggregation, num_sequences=2, num_tokens=5, max_tokens=max_tokens)
    return policy_gradient_loss(logprobs, batch(), scale, torch.ones_like(MASK)).item()


# Per-sequence sums of A_i * log pi over response tokens: row 0: 1 * (-1.5), row 1: -0.5 * (-2.5).
ROW_SUMS = [1.0 * (-0.5 - 1.0), -0.5 * (-0.2 - 0.3 - 2.0)]


def test_token_mean_divides_by_every_response_token_of_the_batch():
    assert loss_for("token_mean") == pytest.approx(-sum(ROW_SUMS) / 5)


def test_sequence_mean_averages_each_sequence_then_the_sequences():
    assert loss_for("sequence_mean") == pytest.approx(-(ROW_SUMS[0] / 2 + ROW_SUMS[1] / 3) / 2)


def test_constant_divides_by_sequences_times_the_token_budget():
    assert loss_for("constant", max_tokens=16) == pytest.approx(-sum(ROW_SUMS) / (2 * 16))
    with pytest.raises(ValueError, match="max_tokens"):
        loss_for("constant")


def test_scales_of_rank_slices_add_up_to_the_full_batch():
    """A rank holding row 1 only, with the global counts, computes its exact share."""
    full = token_scale(MASK, "sequence_mean", 2, 5)
    rank1 = token_scale(MASK[1:], "sequence_mean", 2, 5)
    assert torch.equal(full[1:], rank1)


def test_clipped_surrogate_matches_ppo_by_hand():
    # ratios r = exp(lp - behaviour): row 0 (A = 1): 1.5, 0.9; row 1 (A = -0.5): 0.5, 1.1, 1.0.
    ratios = [[1.0, 1.5, 0.9, 1.0], [1.0, 0.5, 1.1, 1.0]]
    behaviour = [[0.0] * 4, [0.0] * 4]
    logprobs = torch.tensor([[math.log(r) for r in row] for row in ratios], requires_grad=True)
    scale = token_scale(MASK, "token_mean", 2, 5)
    loss, cut = clipped_surrogate_loss(logprobs, batch(behaviour), scale, clip_low=0.2, clip_high=0.28)
    # min(r A, clip(r, 0.8, 1.28) A): 1.5 -> 1.28 (cut), 0.9 -> 0.9; 0.5 -> 0.8 * -0.5 (cut),
    # 1.1 -> -0.55, 1.0 -> -0.5 (the last row's fourth position is a response token too).
    objective = 1.28 + 0.9 + (-0.4) + (-0.55) + (-0.5 * 1.0)
    assert loss.item() == pytest.approx(-objective / 5)
    assert cut.item() == 2
    loss.backward()
    # d(-r A s)/d lp = -A r s where the ratio is inside the clip; 0 where it was cut.
    expected = torch.tensor([[0.0, 0.0, -0.9 / 5, 0.0], [0.0, 0.0, 0.5 * 1.1 / 5, 0.5 * 1.0 / 5]])
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)


def test_advantages_without_std_scaling_are_centred_rewards():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=False) == [0.5, -0.5, -0.5, 0.5]
    scaled = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert scaled[0] == pytest.approx(0.5 / (0.5 + 1e-4))
