"""Loss aggregations, advantage scaling and PPO clipping against hand computations on a fixed batch."""

import math

import pytest
import torch

from forge_async.data.batch import TrainBatch
from forge_async.losses.advantages import group_advantages
from forge_async.losses.config import ImportanceConfig
from forge_async.losses.grpo import (
    OffPolicySums,
    clipped_surrogate_loss,
    entropy_bonus,
    importance_weights,
    policy_gradient_loss,
    token_scale,
)
from forge_async.losses.sliced_softmax import token_entropy

pytestmark = pytest.mark.unit

# Two sequences' per-token columns, a response token where the mask is 1: row 0 has 2, row 1 has 3.
MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
LOGPROBS = [[0.0, -0.5, -1.0, 0.0], [0.0, -0.2, -0.3, -2.0]]
ADVANTAGES = [1.0, -0.5]


def batch(behaviour: list[list[float]] | None = None) -> TrainBatch:
    return TrainBatch(
        tokens=torch.zeros(2, 5, dtype=torch.long),
        positions=None,
        attention_mask=None,
        logit_index=torch.zeros(2, 4, dtype=torch.long),
        targets=torch.zeros(2, 4, dtype=torch.long),
        response_mask=MASK,
        behaviour_logprobs=torch.tensor(behaviour) if behaviour else torch.zeros(2, 4),
        versions=torch.zeros(2, 4, dtype=torch.long),
        advantages=torch.tensor(ADVANTAGES).unsqueeze(1) * MASK,
        reference_logprobs=torch.zeros(2, 4),
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


def test_entropy_bonus_matches_hand_computation_and_raises_the_entropy():
    # Every position's next-token distribution is softmax([2, 0, -1]).
    logits = torch.tensor([2.0, 0.0, -1.0]).repeat(2, 4, 1).requires_grad_()
    probs = [math.exp(z) for z in (2.0, 0.0, -1.0)]
    probs = [q / sum(probs) for q in probs]
    entropy = -sum(q * math.log(q) for q in probs)
    scale = token_scale(MASK, "token_mean", num_sequences=2, num_tokens=5)
    bonus = entropy_bonus(token_entropy(torch.log_softmax(logits, dim=-1)), scale, coef=0.1)
    assert bonus.item() == pytest.approx(-0.1 * entropy * 5 / 5)  # 5 response tokens, each 1/5
    bonus.backward()
    # A step down the gradient moves response positions towards uniform; the others get none.
    assert torch.equal(logits.grad[MASK == 0], torch.zeros(3, 3))
    stepped = torch.log_softmax(logits.detach() - 10.0 * logits.grad, dim=-1)
    assert (token_entropy(stepped)[MASK == 1] > entropy + 1e-3).all()


def test_advantages_without_std_scaling_are_centred_rewards():
    assert group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=False) == [0.5, -0.5, -0.5, 0.5]
    scaled = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert scaled[0] == pytest.approx(0.5 / (0.5 + 1e-4))


# Log-ratios log(pi_theta / pi_behaviour) of the response tokens: row 0 sums to 0.2, row 1 to -0.8.
LOG_RATIOS = [[0.0, 0.3, -0.1, 0.0], [0.0, 1.0, -2.0, 0.2]]
E = math.exp


@pytest.mark.parametrize(
    "importance, weights, truncated, masked",
    [
        # token level, truncated at 1: e^0.3, e^1 and e^0.2 are cut to 1.
        (ImportanceConfig(), [[1, E(-0.1)], [1, E(-2), 1]], 3, 0),
        # sequence level: row 0's ratio e^0.2 is cut to 1 (2 tokens), row 1's e^-0.8 kept.
        (ImportanceConfig(level="sequence"), [[1, 1], [E(-0.8)] * 3], 2, 0),
        # token level, masked outside [0.5, 2]: e^1 and e^-2 are left out.
        (ImportanceConfig(mode="mask"), [[1, 1], [0, 0, 1]], 0, 2),
        # sequence level, masked: row 1's e^-0.8 = 0.45 < 0.5 leaves its 3 tokens out.
        (ImportanceConfig(level="sequence", mode="mask"), [[1, 1], [0, 0, 0]], 0, 3),
        # no correction.
        (ImportanceConfig(cap=None), [[1, 1], [1, 1, 1]], 0, 0),
    ],
)
def test_importance_levels_and_modes(importance, weights, truncated, masked):
    logprobs = torch.tensor(LOGPROBS)
    behaviour = (logprobs - torch.tensor(LOG_RATIOS)).tolist()
    got, sums = importance_weights(logprobs, batch(behaviour), importance)
    expected = torch.zeros_like(MASK)
    expected[0, 1:3] = torch.tensor(weights[0], dtype=torch.float32)
    expected[1, 1:4] = torch.tensor(weights[1], dtype=torch.float32)
    assert torch.allclose(got, expected, atol=1e-6)
    assert sums.truncated.item() == truncated and sums.masked.item() == masked
    summary = OffPolicySums.summary(sums.as_tensor(), sums.maxima())
    assert summary["is/masked_frac"] == pytest.approx(masked / 5)
    # The loss weights each token's term by it: token mean of -A_i * w_it * log pi_it.
    scale = token_scale(MASK, "token_mean", num_sequences=2, num_tokens=5)
    hand = (
        -sum(
            ADVANTAGES[i] * w * lp
            for i, (row_w, row_lp) in enumerate(zip(weights, ([-0.5, -1.0], [-0.2, -0.3, -2.0])))
            for w, lp in zip(row_w, row_lp)
        )
        / 5
    )
    assert policy_gradient_loss(logprobs, batch(behaviour), scale, got).item() == pytest.approx(hand, abs=1e-6)
