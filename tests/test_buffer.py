"""Replay buffer: policy-age drops at the boundaries, counts, capacity, the actor."""

import asyncio

import pytest

from forge_async.data.buffer import EpisodeBuffer
from forge_async.data.episode import Completion, Episode
from forge_async.launch import meshes


def episode(versions: list[int]) -> Episode:
    completion = Completion(
        prompt_ids=[11, 1, 13],
        token_ids=[1] * len(versions),
        logprobs=[-1.0] * len(versions),
        versions=versions,
        text="1" * len(versions),
        finish_reason="length",
    )
    return Episode(completion, reward=0.0, advantage=0.0)


def scored(group_id: int, reward: float) -> Episode:
    e = episode([0])
    e.group_id, e.reward = group_id, reward
    return e


def test_groups_with_equal_rewards_are_dropped_and_counted_when_asked():
    groups = [scored(0, 1.0), scored(0, 1.0), scored(1, 0.0), scored(1, 1.0), scored(2, 0.5), scored(2, 0.5)]
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True)
    buffer.add(groups)
    stats = buffer.stats()
    assert stats["size"] == 2 and stats["dropped_by_reason"] == {"zero_variance": 4}
    assert stats["added"] == stats["size"] + stats["dropped_other"]  # every episode accounted for
    assert [e.group_id for e in buffer.sample(2, trainer_version=0)] == [1, 1]
    plain = EpisodeBuffer(max_policy_age=2, capacity=100)
    plain.add(groups)
    assert len(plain) == 6 and plain.stats()["dropped_other"] == 0


def test_the_oversampling_cap_keeps_no_signal_groups_beyond_it_until_the_next_batch():
    """At most 4 no-signal episodes dropped between two batches: whole groups, in arrival order."""
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True, max_zero_variance_drops=4)
    buffer.add([scored(0, 1.0), scored(0, 1.0), scored(1, 0.0), scored(1, 0.0), scored(2, 0.0), scored(2, 1.0)])
    buffer.add([scored(3, 0.0), scored(3, 0.0), scored(4, 1.0), scored(4, 1.0)])
    stats = buffer.stats()
    assert stats["dropped_by_reason"] == {"zero_variance": 4} and stats["kept_zero_variance"] == 4
    assert [e.group_id for e in buffer.sample(6, trainer_version=0)] == [2, 2, 3, 3, 4, 4]
    buffer.add([scored(5, 0.0), scored(5, 0.0), scored(6, 0.0), scored(6, 0.0), scored(7, 1.0), scored(7, 1.0)])
    stats = buffer.stats()  # a batch was taken: the cap starts over
    assert stats["dropped_by_reason"]["zero_variance"] == 8 and stats["kept_zero_variance"] == 6  # group 7 over the cap
    assert stats["added"] == stats["sampled"] + stats["dropped_other"] + stats["size"]
    restored = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True, max_zero_variance_drops=4)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == stats


def test_age_equal_to_max_is_kept_and_one_more_is_dropped():
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100)
    buffer.add([episode([3]), episode([2]), episode([4])])
    # trainer at version 5: ages 2, 3, 1
    batch = buffer.sample(batch_size=2, trainer_version=5)
    assert [e.oldest_version for e in batch] == [3, 4]
    assert buffer.stats()["dropped_stale"] == 1


def test_age_is_taken_from_the_oldest_token():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=100)
    buffer.add([episode([1, 2, 3])])  # spread 2; oldest token is version 1
    assert buffer.sample(batch_size=1, trainer_version=3) is None
    assert buffer.stats()["dropped_stale"] == 1


def test_max_policy_age_zero_keeps_only_current_version():
    buffer = EpisodeBuffer(max_policy_age=0, capacity=100)
    buffer.add([episode([4]), episode([5]), episode([5])])
    batch = buffer.sample(batch_size=2, trainer_version=5)
    assert [e.oldest_version for e in batch] == [5, 5]
    assert buffer.stats() == {
        "size": 0,
        "added": 3,
        "sampled": 2,
        "dropped_stale": 1,
        "dropped_other": 0,
        "dropped_by_reason": {"stale": 1},
        "kept_zero_variance": 0,
    }


def test_empty_and_short_buffer_return_none_without_losing_episodes():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=100)
    assert buffer.sample(batch_size=1, trainer_version=0) is None
    buffer.add([episode([0])])
    assert buffer.sample(batch_size=2, trainer_version=0) is None
    assert len(buffer) == 1
    assert len(buffer.sample(batch_size=1, trainer_version=0)) == 1


def test_capacity_evicts_oldest_and_counts_it():
    buffer = EpisodeBuffer(max_policy_age=10, capacity=2)
    buffer.add([episode([0]), episode([1]), episode([2])])
    assert [e.oldest_version for e in buffer.sample(2, trainer_version=2)] == [1, 2]
    assert buffer.stats()["dropped_other"] == 1
    assert buffer.stats()["dropped_by_reason"] == {"overflow": 1, "stale": 0}


def test_accounting_adds_up():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=5)
    buffer.add([episode([v]) for v in range(8)])
    buffer.sample(batch_size=2, trainer_version=6)
    s = buffer.stats()
    assert s["added"] == s["sampled"] + s["dropped_stale"] + s["dropped_other"] + s["size"]


def test_state_dict_round_trip_keeps_episodes_and_counters():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=5)
    buffer.add([episode([v]) for v in range(8)])
    buffer.sample(batch_size=2, trainer_version=6)
    restored = EpisodeBuffer(max_policy_age=1, capacity=5)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == buffer.stats()
    assert [e.oldest_version for e in restored.sample(1, 7)] == [7]
    assert restored.stats()["sampled"] == 3


@pytest.mark.parametrize("bad", [{"max_policy_age": -1, "capacity": 4}, {"max_policy_age": 0, "capacity": 0}])
def test_bad_settings_are_rejected(bad):
    with pytest.raises(ValueError, match="must be"):
        EpisodeBuffer(**bad)


def test_replay_buffer_actor_drops_stale_across_procs():
    procs, buffer = asyncio.run(meshes.spawn_replay_buffer(max_policy_age=1, capacity=10))
    try:
        buffer.add.call_one([episode([0]), episode([1]), episode([2])]).get()
        batch = buffer.sample.call_one(2, 2).get()
        assert [e.oldest_version for e in batch] == [1, 2]
        assert buffer.stats.call_one().get()["dropped_stale"] == 1
    finally:
        asyncio.run(meshes.stop_all(procs))
