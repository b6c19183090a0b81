"""Replay buffer: policy-age drops at the boundaries, counts, capacity, its typed arguments, the
handle's ledger, the actor."""

import asyncio
import time
from collections import Counter
from dataclasses import asdict

import pytest

from forge_async.data.buffer import BufferStats, DropCounts, EpisodeBuffer, length_quartiles, stale_drops_by_length
from forge_async.data.episode import Completion, Episode
from forge_async.errors import ConfigError
from forge_async.handles import meshes
from forge_async.handles.buffer import BufferLedger

pytestmark = pytest.mark.unit


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
    assert stats.size == 2 and stats.dropped_by_reason == {"zero_variance": 4}
    assert stats.added == stats.size + stats.dropped_other  # every episode accounted for
    assert [e.group_id for e in buffer.sample(2, trainer_version=0)] == [1, 1]
    plain = EpisodeBuffer(max_policy_age=2, capacity=100)
    plain.add(groups)
    assert len(plain) == 6 and plain.stats().dropped_other == 0


def test_groups_with_equal_rewards_but_a_per_token_signal_are_kept():
    """A teacher's per-token advantages are signal the rewards do not show: such a group is kept."""
    distilled = [scored(0, 1.0), scored(0, 1.0)]
    distilled[0].token_advantages = [0.25]
    distilled[1].token_advantages = [-0.25]
    silent = [scored(1, 1.0), scored(1, 1.0)]
    silent[0].token_advantages = silent[1].token_advantages = [0.0]  # a teacher that agreed everywhere
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True)
    buffer.add(distilled + silent)
    assert buffer.stats().dropped_by_reason == {"zero_variance": 2}
    assert [e.group_id for e in buffer.sample(2, trainer_version=0)] == [0, 0]


def test_the_oversampling_cap_keeps_no_signal_groups_beyond_it_until_the_next_batch():
    """At most 4 no-signal episodes dropped between two batches: whole groups, in arrival order."""
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True, max_zero_variance_drops=4)
    buffer.add([scored(0, 1.0), scored(0, 1.0), scored(1, 0.0), scored(1, 0.0), scored(2, 0.0), scored(2, 1.0)])
    buffer.add([scored(3, 0.0), scored(3, 0.0), scored(4, 1.0), scored(4, 1.0)])
    stats = buffer.stats()
    assert stats.dropped_by_reason == {"zero_variance": 4} and stats.kept_zero_variance == 4
    assert [e.group_id for e in buffer.sample(6, trainer_version=0)] == [2, 2, 3, 3, 4, 4]
    buffer.add([scored(5, 0.0), scored(5, 0.0), scored(6, 0.0), scored(6, 0.0), scored(7, 1.0), scored(7, 1.0)])
    stats = buffer.stats()  # a batch was taken: the cap starts over
    assert stats.dropped_by_reason["zero_variance"] == 8 and stats.kept_zero_variance == 6  # group 7 over the cap
    assert stats.added == stats.sampled + stats.dropped_other + stats.size
    restored = EpisodeBuffer(max_policy_age=2, capacity=100, drop_zero_variance=True, max_zero_variance_drops=4)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == stats


def test_age_equal_to_max_is_kept_and_one_more_is_dropped():
    buffer = EpisodeBuffer(max_policy_age=2, capacity=100)
    buffer.add([episode([3]), episode([2]), episode([4])])
    # trainer at version 5: ages 2, 3, 1
    batch = buffer.sample(batch_size=2, trainer_version=5)
    assert [e.oldest_version for e in batch] == [3, 4]
    assert buffer.stats().dropped_stale == 1


def test_age_is_taken_from_the_oldest_token():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=100)
    buffer.add([episode([1, 2, 3])])  # spread 2; oldest token is version 1
    assert buffer.sample(batch_size=1, trainer_version=3) is None
    assert buffer.stats().dropped_stale == 1


def test_max_policy_age_zero_keeps_only_current_version():
    buffer = EpisodeBuffer(max_policy_age=0, capacity=100)
    buffer.add([episode([4]), episode([5]), episode([5])])
    batch = buffer.sample(batch_size=2, trainer_version=5)
    assert [e.oldest_version for e in batch] == [5, 5]
    assert buffer.stats() == BufferStats(
        size=0,
        added=3,
        sampled=2,
        dropped_stale=1,
        dropped_other=0,
        dropped_by_reason={"stale": 1},
        kept_zero_variance=0,
        dropped_stale_by_len={
            "quartiles": [{"lengths": [1, 1], "added": 3, "dropped_stale": 1, "drop_rate": 1 / 3}],
            "longest_to_shortest": None,  # one quartile: nothing to compare
        },
    )


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
    assert buffer.stats().dropped_other == 1
    assert buffer.stats().dropped_by_reason == {"overflow": 1, "stale": 0}


def test_accounting_adds_up():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=5)
    buffer.add([episode([v]) for v in range(8)])
    buffer.sample(batch_size=2, trainer_version=6)
    s = buffer.stats()
    assert s.added == s.sampled + s.dropped_stale + s.dropped_other + s.size


def test_state_dict_round_trip_keeps_episodes_and_counters():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=5)
    buffer.add([episode([v]) for v in range(8)])
    buffer.sample(batch_size=2, trainer_version=6)
    restored = EpisodeBuffer(max_policy_age=1, capacity=5)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == buffer.stats()
    assert [e.oldest_version for e in restored.sample(1, trainer_version=7)] == [7]
    assert restored.stats().sampled == 3


def test_lengths_of_added_and_stale_episodes_are_counted_and_kept_in_the_state():
    buffer = EpisodeBuffer(max_policy_age=1, capacity=100)
    buffer.add([episode([0, 0, 0]), episode([0]), episode([2, 2]), episode([2])])
    buffer.sample(batch_size=2, trainer_version=2)  # the two of version 0 are stale
    assert buffer.added_by_len == {3: 1, 1: 2, 2: 1} and buffer.stale_by_len == {3: 1, 1: 1}
    restored = EpisodeBuffer(max_policy_age=1, capacity=100)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == buffer.stats()
    old_checkpoint = {k: v for k, v in buffer.state_dict().items() if not k.endswith("_by_len")}
    restored.load_state_dict(old_checkpoint)  # written before lengths were counted
    assert restored.stats().dropped_stale_by_len == {"quartiles": [], "longest_to_shortest": None}


def test_length_quartiles_split_by_rank_and_keep_one_length_together():
    assert length_quartiles(Counter({n: 10 for n in range(2, 10)})) == [[2, 3], [4, 5], [6, 7], [8, 9]]
    # 2's episodes take ranks 0-69 (middle 35: quartile 2 of 4), 9's ranks 70-79 (the last)
    assert length_quartiles(Counter({2: 70, 9: 10})) == [[2], [9]]
    assert length_quartiles(Counter({5: 3})) == [[5]]
    assert length_quartiles(Counter()) == []


def test_stale_drops_by_length_matches_a_hand_computation():
    # 100 episodes; middle ranks: 2: 15, 3: 35, 4: 45, 6: 62.5, 9: 87.5 -> quartiles 1, 2, 2, 3, 4
    added = Counter({2: 30, 3: 10, 4: 10, 6: 25, 9: 25})
    stale = Counter({2: 3, 9: 5, 6: 1})
    report = stale_drops_by_length(added, stale)
    assert report["quartiles"] == [
        {"lengths": [2, 2], "added": 30, "dropped_stale": 3, "drop_rate": 0.1},
        {"lengths": [3, 4], "added": 20, "dropped_stale": 0, "drop_rate": 0.0},
        {"lengths": [6, 6], "added": 25, "dropped_stale": 1, "drop_rate": 0.04},
        {"lengths": [9, 9], "added": 25, "dropped_stale": 5, "drop_rate": 0.2},
    ]
    assert report["longest_to_shortest"] == pytest.approx(2.0)  # 0.2 / 0.1
    assert stale_drops_by_length(added, Counter({9: 5}))["longest_to_shortest"] is None  # shortest: no drops
    assert stale_drops_by_length(added, Counter())["longest_to_shortest"] is None  # no drops at all


@pytest.mark.parametrize(
    "bad, named",
    [({"max_policy_age": -1, "capacity": 4}, "max_policy_age"), ({"max_policy_age": 0, "capacity": 0}, "capacity")],
)
def test_bad_settings_are_rejected_and_named_before_any_proc_starts(bad, named):
    with pytest.raises(ConfigError, match=f"replay buffer: {named} must be"):
        EpisodeBuffer(**bad)
    with pytest.raises(ConfigError, match=f"replay buffer: {named} must be"):
        asyncio.run(meshes.spawn_replay_buffer(**bad))  # refused here, in the caller: no proc spawned


def test_drop_counts_count_what_started_apart_from_what_did_not():
    """Samples lost on the way: those that reached a generator are generated (`added`), those
    dropped before their first model turn are not; both are drops by reason."""
    episodes = [scored(0, 1.0), scored(0, 0.0)]
    buffer = EpisodeBuffer(max_policy_age=1, capacity=8)
    buffer.add(episodes, dropped=DropCounts.unscored(1) + DropCounts({"env_error": 2}, {"env_error": 3}))
    stats = buffer.stats()
    assert (stats.added, stats.size, stats.dropped_other, stats.dropped_total) == (5, 2, 3, 6)
    assert stats.dropped_by_reason == {"scorer_error": 1, "env_error": 5} and stats.not_started == {"env_error": 3}
    assert stats.added == stats.size + stats.dropped_other  # every generated sample accounted for
    counts = DropCounts({"scorer_error": 2, "env_error": 0}, {"env_error": 1})
    assert (counts.started, counts.generated(), counts.total()) == ({"scorer_error": 2}, 2, 3)  # no zero counts
    assert counts.by_reason() == {"scorer_error": 2, "env_error": 1}
    assert DropCounts.unscored(0) == DropCounts()


@pytest.mark.parametrize(
    "add", [lambda b, e: b.add(e, 1), lambda b, e: b.add(e, dropped=1), lambda b, e: b.add(e, dropped={"x": 1})]
)
def test_an_add_with_untyped_drop_counts_is_refused_and_counts_nothing(add):
    """The count ScoringTier.score returns beside its episodes is not drop counts: handed to add
    as they come, they are refused at once, not on the first unscorable completion."""
    buffer = EpisodeBuffer(max_policy_age=1, capacity=8)
    with pytest.raises(TypeError, match="positional|add's dropped: a DropCounts"):
        add(buffer, [scored(0, 1.0)])
    assert buffer.stats().added == 0 and len(buffer) == 0
    with pytest.raises(TypeError, match=r"DropCounts.started maps reasons \(str\) to sample counts"):
        DropCounts({"scorer_error": -1})


def test_the_handles_ledger_tells_what_a_lost_buffer_held():
    buffer = EpisodeBuffer(max_policy_age=0, capacity=8)
    buffer.add([episode([1]), episode([0]), episode([1])], dropped=DropCounts({"scorer_error": 1}, {"env_error": 2}))
    buffer.sample(1, trainer_version=1)  # drops the version-0 one as stale
    ledger = BufferLedger.of_state(buffer.state_dict())
    assert (ledger.added, ledger.sampled, ledger.held()) == (4, 1, 1) == (buffer.added, buffer.sampled, len(buffer))
    lost = ledger.lost(ledger.held())
    assert lost.dropped == {"scorer_error": 1, "env_error": 2, "stale": 1, "buffer_lost": 1} and lost.held() == 0
    restored = EpisodeBuffer(max_policy_age=0, capacity=8)
    restored.load_state_dict({"episodes": [], **asdict(lost)})  # what a respawned buffer is given
    stats = restored.stats()
    assert stats.added == stats.sampled + stats.dropped_other + stats.dropped_stale + stats.size


@pytest.mark.procs
def test_replay_buffer_actor_drops_stale_across_procs():
    procs, buffer = asyncio.run(meshes.spawn_replay_buffer(max_policy_age=1, capacity=10))
    try:
        with pytest.raises(TypeError):  # Monarch checks the call against the endpoint, in the caller
            buffer.add.call_one([episode([0])], 1).get()
        buffer.add.call_one([episode([0]), episode([1]), episode([2])], dropped=DropCounts.unscored(1)).get()
        batch = buffer.sample.call_one(2, trainer_version=2).get()
        assert [e.oldest_version for e in batch] == [1, 2]
        assert buffer.stats.call_one().get().dropped_by_reason == {"scorer_error": 1, "stale": 1}
        buffer.add.call_one([episode([2]), episode([3])]).get()
        batch, stats = buffer.sample_with_stats.call_one(1, trainer_version=4).get()  # the version-2 one is stale now
        assert [e.oldest_version for e in batch] == [3]
        assert (stats.dropped_stale, stats.sampled, stats.size) == (2, 3, 0)
        assert_a_waiting_sample_takes_the_next_add(buffer)
    finally:
        asyncio.run(meshes.stop_all(procs))


def assert_a_waiting_sample_takes_the_next_add(buffer) -> None:
    """A sample_with_stats that finds no batch waits in the actor (which meanwhile takes the
    add) and returns the batch the add completes; one that drops stale episodes returns
    at once, so that the caller hears of the drop."""

    async def sample_while_adding() -> tuple:
        waiting = buffer.sample_with_stats.call_one(2, trainer_version=4, wait_s=30.0)
        await asyncio.sleep(0.3)  # the sample is in the actor, waiting, by now
        await buffer.add.call_one([episode([4]), episode([4])])
        return await waiting

    batch, stats = asyncio.run(sample_while_adding())
    assert [e.oldest_version for e in batch] == [4, 4] and stats.size == 0
    buffer.add.call_one([episode([1])]).get()
    asked = time.monotonic()
    batch, stats = buffer.sample_with_stats.call_one(2, trainer_version=4, wait_s=30.0).get()  # drops the v1 one
    assert batch is None and stats.dropped_stale == 3
    assert time.monotonic() - asked < 20  # it did not wait out its 30 s
