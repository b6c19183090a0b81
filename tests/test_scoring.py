"""The scoring tier: reward functions combined by weight, errors failed or dropped and counted,
the reference KL against a hand computation, and a teacher equal to the student giving no signal.

Model scorers run on real LogprobModel procs and are compared with the real vLLM generator.
"""

import asyncio
import math

import numpy as np
import pytest
import torch

from forge_async.generation.config import SamplingConfig
from forge_async.data.batch import TrainBatch, pack_episodes
from forge_async.data.buffer import DropCounts, EpisodeBuffer
from forge_async.data.episode import ENV_TOKEN, Completion
from forge_async.data.kept_sets import KeptSets
from forge_async.tasks.task import Prompt
from forge_async.handles import meshes
from forge_async.losses.advantages import group_advantages
from forge_async.losses.grpo import policy_gradient_loss, reference_kl, token_scale
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.scoring.scorer import ScorerError
from forge_async.scoring.tier import build_tier, position_centered
from tests.support.digits import PAD_ID

pytestmark = pytest.mark.unit


def starts_with_answer(prompt: Prompt, completion: Completion) -> float:
    return float(completion.text.startswith(prompt.answer))


def shortness(prompt: Prompt, completion: Completion) -> float:
    return 1.0 / len(completion.token_ids)


async def async_length(prompt: Prompt, completion: Completion) -> float:
    await asyncio.sleep(0)
    return float(len(completion.token_ids))


def batched_length(prompts: list[Prompt], completions: list[Completion]) -> list[float]:
    return [float(len(c.token_ids)) for c in completions]


def says_yes(prompt: Prompt, completion: Completion) -> str:
    return "yes"


def fails_on_x(prompt: Prompt, completion: Completion) -> float:
    if "x" in completion.text:
        raise RuntimeError("cannot judge an x")
    return 1.0


def completion(text: str, logprobs: list[float] | None = None) -> Completion:
    ids = [ord(ch) for ch in text]
    return Completion([1, 2], ids, logprobs or [-1.0] * len(ids), [0] * len(ids), text, "stop")


PROMPTS = [Prompt([1, 2], answer="7", text="p0"), Prompt([1, 2], answer="3", text="p1")]
GROUPS = [[completion("7"), completion("7ab"), completion("1")], [completion("3x"), completion("93")]]


def score(scorers: list[ScorerConfig], scoring: ScoringConfig | None = None, groups=GROUPS):
    tier = build_tier(scorers, scoring or ScoringConfig(), task=None)
    return asyncio.run(tier.score(PROMPTS, groups, first_group_id=10))


def test_weighted_reward_functions_combine_and_are_each_logged():
    episodes, unscored = score(
        [
            ScorerConfig(fn="test_scoring:starts_with_answer", weight=1.0),
            ScorerConfig(fn="test_scoring:shortness", weight=0.5, name="short"),
        ]
    )
    assert unscored == 0
    assert [e.group_id for e in episodes] == [10, 10, 10, 11, 11]
    expected = [1 + 0.5 / 1, 1 + 0.5 / 3, 0 + 0.5 / 1, 1 + 0.5 / 2, 0 + 0.5 / 2]
    assert [e.reward for e in episodes] == pytest.approx(expected)
    assert [e.metrics for e in episodes[:2]] == [
        {"reward/starts_with_answer": 1.0, "reward/short": 1.0},
        {"reward/starts_with_answer": 1.0, "reward/short": pytest.approx(1 / 3)},
    ]
    advantages = group_advantages(expected[:3]) + group_advantages(expected[3:])
    assert [e.advantage for e in episodes] == pytest.approx(advantages)
    assert all(e.token_advantages is None and e.reference_logprobs is None for e in episodes)


def test_async_and_batched_reward_functions_score_alike():
    one = score([ScorerConfig(fn="test_scoring:async_length")])[0]
    batched = score([ScorerConfig(fn="test_scoring:batched_length", batched=True)])[0]
    assert [e.reward for e in one] == [e.reward for e in batched] == [1.0, 3.0, 1.0, 2.0, 2.0]


def test_without_outcome_advantage_rewards_are_reported_not_trained_on():
    episodes, _ = score([ScorerConfig(fn="test_scoring:shortness")], ScoringConfig(outcome_advantage=False))
    assert [e.reward for e in episodes] == pytest.approx([1.0, 1 / 3, 1.0, 0.5, 0.5])
    assert [e.advantage for e in episodes] == [0.0] * 5


def test_a_raising_scorer_fails_naming_scorer_prompt_and_completion():
    with pytest.raises(
        ScorerError,
        match=r"scorer 'fails_on_x' raised RuntimeError: cannot judge an x "
        r"\(prompt 'p1', completion '3x'\)",
    ):
        score([ScorerConfig(fn="test_scoring:fails_on_x")])


def test_dropped_completions_are_counted_and_the_rest_of_the_group_is_scored():
    episodes, unscored = score([ScorerConfig(fn="test_scoring:fails_on_x")], ScoringConfig(on_error="drop"))
    assert unscored == 1
    assert [e.completion.text for e in episodes] == ["7", "7ab", "1", "93"]
    buffer = EpisodeBuffer(max_policy_age=1, capacity=16)
    buffer.add(episodes, dropped=DropCounts.unscored(unscored))
    stats = buffer.stats()
    assert stats.dropped_by_reason == {"scorer_error": 1}
    assert stats.added == 5 == stats.size + stats.dropped_other


def test_a_reward_that_is_not_a_number_is_a_scorer_error():
    with pytest.raises(ScorerError, match=r"scorer 'says_yes' raised ValueError: returned 'yes', not a finite number"):
        score([ScorerConfig(fn="test_scoring:says_yes")])


def test_per_token_rewards_are_centred_on_the_other_completions_at_each_position():
    """Leave-one-out: each token's baseline is the mean over the group's other completions with a
    model token at its position, 0 where none has; a lone completion keeps its whole signal."""
    rewards = [[1.0, 2.0], [3.0], [2.0, 4.0, 5.0]]
    everywhere = [[True] * len(r) for r in rewards]
    # Position 0: 1 - (3 + 2) / 2, 3 - (1 + 2) / 2, 2 - (1 + 3) / 2; position 1: 2 - 4, 4 - 2; position 2: 5 alone.
    assert position_centered(rewards, everywhere) == [[-1.5, -2.0], [1.5], [0.0, 2.0, 5.0]]
    # A group of one: nothing to compare with, its signal stays.
    assert position_centered([[0.5, -1.0]], [[True, True]]) == [[0.5, -1.0]]


def test_the_per_position_baseline_counts_model_tokens_only():
    # Completion 1's position 1 is the environment's: completion 0 is alone there, completion 1 gets 0.
    rewards = [[1.0, 2.0, 3.0], [5.0, 7.0, 1.0]]
    masks = [[True, True, True], [True, False, True]]
    assert position_centered(rewards, masks) == [[-4.0, 2.0, 2.0], [4.0, 0.0, -2.0]]


class GivenLogprobs:
    """A scorer model that gives each completion (by its token ids) the logprobs `by_tokens` holds,
    over the whole vocabulary; it takes no kept sets."""

    def __init__(self, by_tokens: dict[tuple[int, ...], list[float]]):
        self.by_tokens = by_tokens
        self.calls = 0

    async def completion_logprobs(self, prompt_ids, completion_ids):
        self.calls += 1
        return [self.by_tokens[tuple(ids)] for ids in completion_ids]


def given_teacher_tier(model, scoring: ScoringConfig | None = None):
    scorers = [ScorerConfig(fn="test_scoring:shortness", weight=0.0), ScorerConfig(kind="teacher", path="unused")]
    return build_tier(scorers, scoring or ScoringConfig(), None, {1: model})


def turns(ids: list[int], logprobs: list[float], env: set[int] = frozenset(), kept_sets=None) -> Completion:
    """A completion whose tokens at positions `env` are the environment's (version ENV_TOKEN, logprob 0)."""
    versions = [ENV_TOKEN if t in env else 0 for t in range(len(ids))]
    logprobs = [0.0 if t in env else lp for t, lp in enumerate(logprobs)]
    return Completion([1, 2], ids, logprobs, versions, "", "done", kept_sets=kept_sets)


def test_a_teacher_on_multi_turn_episodes_scores_only_the_model_tokens():
    """Environment tokens get no token reward, count in no reverse KL, and are no other completion's
    baseline; the environment's tokens of `a` (positions 1, 2) are ones its teacher finds unlikely."""
    a = turns([5, 6, 7, 8], [-1.0, 0, 0, -0.5], env={1, 2})
    b = turns([5, 9, 9, 9], [-1.0, -1.0, -1.0, -1.0])
    c = turns([6, 3, 4], [-1.0, -2.0, 0], env={2})
    teacher = GivenLogprobs(
        {(5, 6, 7, 8): [-1.5, -3.0, -2.0, -0.5], (5, 9, 9, 9): [-2.0, -1.0, -1.5, -3.0], (6, 3, 4): [-1.5, -1.0, -4.0]}
    )
    prompts, groups = PROMPTS[:1], [[a, b, c]]
    raw, _ = asyncio.run(given_teacher_tier(teacher, ScoringConfig(token_baseline="none")).score(prompts, groups, 0))
    # u = log pi_teacher - log pi_student on model tokens, 0 on the environment's.
    assert [e.token_advantages for e in raw] == [[-0.5, 0.0, 0.0, 0.0], [-1.0, 0.0, -0.5, -2.0], [-0.5, 1.0, 0.0]]
    assert [e.metrics["distill/reverse_kl"] for e in raw] == pytest.approx([0.25, 0.875, -0.25])
    centred, _ = asyncio.run(given_teacher_tier(teacher).score(prompts, groups, 0))
    # Position 0: all three; 1: b and c; 2: b alone; 3: a and b.
    assert [e.token_advantages for e in centred] == [[0.25, 0.0, 0.0, 2.0], [-0.5, -1.0, -0.5, -2.0], [0.25, 1.0, 0.0]]


def test_a_teacher_compares_over_the_whole_vocabulary_and_is_given_no_kept_sets():
    """The student's side is its whole-vocabulary logprob (the kept set's log mass added)."""
    kept = KeptSets.of([np.array([3, 5]), np.array([9])], log_mass=[-0.25, -1.0])
    student = turns([5, 9], [-0.5, 0.0], kept_sets=kept)
    assert student.whole_logprobs == [-0.75, -1.0]
    teacher = GivenLogprobs({(5, 9): [-1.0, -1.0]})
    episodes, unscored = asyncio.run(
        given_teacher_tier(teacher, ScoringConfig(token_baseline="none")).score(PROMPTS[:1], [[student]], 0)
    )
    assert unscored == 0 and teacher.calls == 1
    assert episodes[0].token_advantages == [-0.25, 0.0]
    assert episodes[0].metrics["distill/reverse_kl"] == pytest.approx(0.125)


def fixed_batch(reference: list[list[float]]) -> TrainBatch:
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    return TrainBatch(
        tokens=torch.zeros(2, 4, dtype=torch.long),
        positions=None,
        attention_mask=None,
        logit_index=torch.zeros(2, 3, dtype=torch.long),
        targets=torch.zeros(2, 3, dtype=torch.long),
        response_mask=mask,
        behaviour_logprobs=torch.zeros(2, 3),
        versions=torch.zeros(2, 3, dtype=torch.long),
        advantages=torch.zeros(2, 3),
        reference_logprobs=torch.tensor(reference),
    )


LOGPROBS = torch.tensor([[0.0, -0.5, -1.2], [0.0, -0.1, 0.0]])


def test_reference_kl_is_the_k3_estimator_by_hand():
    batch = fixed_batch([[0.0, -0.7, -1.0], [0.0, -0.4, 0.0]])
    kl = reference_kl(LOGPROBS, batch)
    # d = log pi_ref - log pi_theta on response tokens: -0.2, 0.2 (row 0), -0.3 (row 1).
    by_hand = [[0.0, math.exp(-0.2) + 0.2 - 1, math.exp(0.2) - 0.2 - 1], [0.0, math.exp(-0.3) + 0.3 - 1, 0.0]]
    assert kl.flatten().tolist() == pytest.approx(sum(by_hand, []), abs=1e-6)  # float32
    assert (kl >= 0).all()


def test_reference_kl_is_exactly_zero_when_the_reference_is_the_policy():
    assert torch.equal(reference_kl(LOGPROBS, fixed_batch(LOGPROBS.tolist())), torch.zeros(2, 3))


@pytest.fixture(scope="module")
def student_model(tiny_checkpoint):
    procs, model = asyncio.run(meshes.spawn_logprob_model(tiny_checkpoint, PAD_ID))
    yield model
    asyncio.run(meshes.stop_all(procs))


def teacher_tier(model):
    """The task reward at weight 0 (reported only) and `model` (a LogprobModel actor) as the teacher."""

    class Teacher:
        async def completion_logprobs(self, prompt_ids, completion_ids):
            return await model.completion_logprobs.call_one(prompt_ids, completion_ids)

    scorers = [
        ScorerConfig(fn="test_scoring:starts_with_answer", weight=0.0),
        ScorerConfig(kind="teacher", path="unused"),
    ]
    return build_tier(scorers, ScoringConfig(), None, {1: Teacher()})


@pytest.mark.procs
def test_teacher_equal_to_student_gives_exactly_zero_advantages_and_loss(student_model, generator):
    prompts = [Prompt([11, 3, 1, 4, 13], answer="4", text="314"), Prompt([11, 9, 2, 6, 13], answer="9", text="926")]
    groups = generator.generate.call_one([p.token_ids for p in prompts], SamplingConfig(max_tokens=3), 4).get()
    flat = [c for group in groups for c in group]
    # The student's own logprobs of its samples, as the trainer's model code computes them.
    own = student_model.completion_logprobs.call_one([c.prompt_ids for c in flat], [c.token_ids for c in flat]).get()
    assert max(abs(a - b) for c, lp in zip(flat, own) for a, b in zip(c.logprobs, lp)) < 1e-4  # = vLLM's
    for c, lp in zip(flat, own):
        c.logprobs = lp
    episodes, _ = asyncio.run(teacher_tier(student_model).score(prompts, groups, 0))
    assert all(e.token_advantages == [0.0] * len(e.completion.token_ids) for e in episodes)
    assert all(e.metrics["distill/reverse_kl"] == 0.0 for e in episodes)
    batch = pack_episodes(episodes, PAD_ID)
    logprobs = torch.randn(batch.response_mask.shape, requires_grad=True)
    scale = token_scale(batch.response_mask, "token_mean", len(episodes), batch.num_response_tokens)
    loss = policy_gradient_loss(logprobs, batch, scale, torch.ones_like(scale))
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(logprobs.grad) == 0
