"""RunRecord keeps what summary.json reports of the per-step rewards, and no more."""

import statistics

import pytest

from forge_async.observability.record import STEP_ENDS, StepEnds, RunRecord

pytestmark = pytest.mark.unit


def first_and_last(rewards: list[float]) -> tuple[float, float]:
    """reward_first and reward_last as summary.json computes them."""
    window = max(1, min(10, len(rewards) // 2))
    return statistics.fmean(rewards[:window]), statistics.fmean(rewards[-window:])


def test_the_ends_give_the_summary_of_every_step_and_stay_bounded():
    for steps in [*range(1, 3 * STEP_ENDS), 30_000]:
        rewards = [float(k * k % 7) for k in range(steps)]
        record = RunRecord()
        for reward in rewards:
            record.reward_ends.append(reward)
        assert len(record.reward_ends.as_list()) == min(steps, 2 * STEP_ENDS)
        assert record.reward_ends.means()[1:] == first_and_last(rewards)


def test_the_ends_survive_a_checkpoint_and_old_checkpoints_load():
    rewards = [float(k) for k in range(100)]
    ends = StepEnds(rewards)
    restored = StepEnds.from_state(ends.state_dict())
    restored.append(100.0)
    assert restored.as_list() == [*rewards[:10], *rewards[91:], 100.0]
    assert StepEnds.from_state(rewards).as_list() == ends.as_list()  # a checkpoint that kept every step's
