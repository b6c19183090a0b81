"""Micro-batches: every episode once, within the token budget, bucketed by length."""

from forge_async.data.batch import micro_batches, sequence_length
from forge_async.data.episode import Completion, Episode


def episode(prompt_len: int, response_len: int) -> Episode:
    completion = Completion(
        prompt_ids=[1] * prompt_len,
        token_ids=[2] * response_len,
        logprobs=[-1.0] * response_len,
        versions=[0] * response_len,
        text="",
        finish_reason="stop",
    )
    return Episode(completion, reward=0.0, advantage=0.0)


def test_every_micro_batch_fits_the_budget_and_every_episode_is_in_one():
    episodes = [episode(4, n) for n in (1, 9, 3, 12, 5, 2, 7, 6)]
    batches = micro_batches(episodes, token_budget=32)
    assert sorted(map(id, (e for b in batches for e in b))) == sorted(map(id, episodes))
    for batch in batches:
        assert len(batch) * max(map(sequence_length, batch)) <= 32
    # Longest first: the padded rows of a micro-batch are of similar length.
    assert [sequence_length(b[0]) for b in batches] == sorted((sequence_length(b[0]) for b in batches), reverse=True)
    assert [[sequence_length(e) for e in b] for b in batches] == [[16, 13], [11, 10], [9, 7, 6], [5]]


def test_a_sequence_longer_than_the_budget_goes_alone_and_none_means_one_batch():
    episodes = [episode(4, 40), episode(4, 2), episode(4, 2)]
    batches = micro_batches(episodes, token_budget=16)
    assert [len(b) for b in batches] == [1, 2]
    assert micro_batches(episodes, None) == [episodes]
    assert micro_batches([], 16) == []
