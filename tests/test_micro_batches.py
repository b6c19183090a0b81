"""Micro-batches: every episode once, within the token budget, bucketed by length."""

import pytest

from forge_async.data.batch import micro_batches, prompt_rows, row_length
from forge_async.data.episode import Completion, Episode

pytestmark = pytest.mark.unit


def episode(prompt_len: int, response_len: int, prompt_token: int = 1) -> Episode:
    completion = Completion(
        prompt_ids=[prompt_token] * prompt_len,
        token_ids=[2] * response_len,
        logprobs=[-1.0] * response_len,
        versions=[0] * response_len,
        text="",
        finish_reason="stop",
    )
    return Episode(completion, reward=0.0, advantage=0.0)


def episodes_of(batches) -> list[int]:
    return sorted(id(e) for batch in batches for row in batch for e in row)


def test_every_micro_batch_fits_the_budget_and_every_episode_is_in_one():
    episodes = [episode(4, n, prompt_token=n) for n in (1, 9, 3, 12, 5, 2, 7, 6)]  # 8 prompts
    batches = micro_batches(prompt_rows(episodes, token_cost=None), token_budget=32)
    assert episodes_of(batches) == sorted(map(id, episodes))
    for batch in batches:
        assert len(batch) * max(map(row_length, batch)) <= 32
    # Longest first: the padded rows of a micro-batch are of similar length.
    assert [[row_length(r) for r in b] for b in batches] == [[16, 13], [11, 10], [9, 7, 6], [5]]


def test_a_sequence_longer_than_the_budget_goes_alone_and_none_means_one_batch():
    rows = prompt_rows([episode(4, 40), episode(4, 2), episode(4, 2)], token_cost=None)
    batches = micro_batches(rows, token_budget=16)
    assert [len(b) for b in batches] == [1, 2]
    assert micro_batches(rows, None) == [rows]
    assert micro_batches([], 16) == []


def test_a_shared_row_longer_than_the_budget_is_cut_into_rows_that_keep_the_prompt():
    episodes = [episode(4, 3) for _ in range(8)]  # one prompt: one row of 4 + 8 x 3 = 28 tokens
    rows = prompt_rows(episodes, token_cost=512.0)
    assert [len(r) for r in rows] == [8]
    batches = micro_batches(rows, token_budget=13)  # 4 + 3 x 3 = 13 tokens a row
    assert episodes_of(batches) == sorted(map(id, episodes))
    assert [[len(r) for r in b] for b in batches] == [[3], [3], [2]]
    assert all(row_length(r) <= 13 for b in batches for r in b)


def test_responses_share_a_prompt_only_while_that_saves_compute():
    short = [episode(8, 3) for _ in range(8)]
    assert [len(r) for r in prompt_rows(short, token_cost=512.0)] == [8]
    # Long responses behind a short prompt: the packed row's attention would cost more than the
    # prompt's linear layers saved, so each keeps a row of its own.
    long = [episode(8, 400) for _ in range(4)]
    assert [len(r) for r in prompt_rows(long, token_cost=512.0)] == [1, 1, 1, 1]
    # Different prompts never share a row; no token cost: one episode per row.
    mixed = [episode(8, 3, prompt_token=t) for t in (1, 2, 1, 2)]
    assert [len(r) for r in prompt_rows(mixed, token_cost=512.0)] == [2, 2]
    assert [len(r) for r in prompt_rows(short, token_cost=None)] == [1] * 8
