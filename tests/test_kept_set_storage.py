"""data/kept_sets.py and its packing: how a completion stores the sets its sampler kept, how a
completion refuses a token outside its set, and where the packed batch says each id belongs."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from forge_async.data.batch import pack_episodes, pack_rows, prompt_rows
from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.data.kept_sets import KeptSets
from forge_async.generation.kept_set_capture import KeptStep
from forge_async.envs.runner import Transcript
from forge_async.generation.versioned_engine import Request, VersionedEngine
from tests.support.digits import PAD_ID

pytestmark = pytest.mark.unit


def sets(*per_token) -> KeptSets:
    return KeptSets.of([None if s is None else np.array(s, dtype=np.int32) for s in per_token])


def test_sets_are_stored_one_after_the_other_with_their_sizes():
    kept = sets([1, 3, 5], None, [2])
    assert kept.ids.tolist() == [1, 3, 5, 2] and kept.sizes.tolist() == [3, 0, 1] and len(kept) == 3
    assert kept.nbytes == 4 * 4 + 3 * 4
    joined = KeptSets.joined([kept, KeptSets.none(2), sets([7])])
    assert joined.sizes.tolist() == [3, 0, 1, 0, 0, 1] and joined.ids.tolist() == [1, 3, 5, 2, 7]


def test_a_token_outside_its_set_or_a_count_that_differs_is_refused():
    Completion([1], [3, 9, 2], [0.0] * 3, [0] * 3, "", "stop", kept_sets=sets([1, 3, 5], None, [2]))
    with pytest.raises(ValueError, match="outside the set"):
        Completion([1], [4, 9, 2], [0.0] * 3, [0] * 3, "", "stop", kept_sets=sets([1, 3, 5], None, [2]))
    with pytest.raises(ValueError, match="3 tokens but 2 kept sets"):
        Completion([1], [3, 9, 2], [0.0] * 3, [0] * 3, "", "stop", kept_sets=sets([1, 3, 5], None))
    with pytest.raises(ValueError, match="sizes add up"):
        KeptSets(np.array([1, 2], np.int32), np.array([1], np.int32), np.zeros(1, np.float32))


def test_the_batch_places_each_id_at_its_episode_s_token_whatever_the_rows():
    """Episode b's token k is flattened token b * width + k, the order of the batch's [B, W]
    tensors, with shared prompt rows or without; episodes without sets add none."""
    first = Completion([5, 6], [1, 2], [0.0] * 2, [0, 0], "", "stop", kept_sets=sets([1, 4], [0, 2, 3]))
    env = Completion([5, 6], [3, 7, 4], [0.0] * 3, [0, ENV_TOKEN, 0], "", "done", kept_sets=sets([3], None, [4, 8]))
    plain = Completion([9], [8], [0.0], [0], "", "stop")
    episodes = [Episode(c, 0.0, 0.0) for c in (first, plain, env)]
    alone = pack_episodes(episodes, PAD_ID)  # one row each: first, plain, env
    shared = pack_rows(prompt_rows(episodes, token_cost=1e6), PAD_ID)  # rows [first, env], [plain]
    width = 3
    for batch, env_at in ((alone, 2), (shared, 1)):
        assert batch.targets.shape[1] == width
        assert batch.kept_tokens.tolist() == [0, 0, 1, 1, 1] + [env_at * width + k for k in (0, 2, 2)]
        assert batch.kept_ids.tolist() == [1, 4, 0, 2, 3, 3, 4, 8]
        targets = batch.targets.flatten()
        held = {(int(t), int(i)) for t, i in zip(batch.kept_tokens, batch.kept_ids)}
        assert all((int(k), int(targets[k])) in held for k in torch.unique(batch.kept_tokens))
    assert pack_episodes([episodes[1]], PAD_ID).kept_ids is None


class _NoRows:
    """A capture whose last step recorded no row for any request."""

    def take(self, engine_request_id: str) -> KeptStep:
        return KeptStep(None, 0.0, over_cap=False, recorded=False)


@pytest.mark.parametrize("temperature", [0.0, 0.7], ids=["greedy", "sampled"])
def test_a_token_with_no_recorded_row_is_counted_if_greedy_and_an_error_if_sampled(temperature):
    """A sampled token with no row would train against the whole vocabulary with no log mass: only a
    greedy step may leave one out (counted as missing); at a temperature it is a defect, said aloud."""
    engine = SimpleNamespace(kept_sets=_NoRows())
    request = Request([1, 2], SimpleNamespace(temperature=temperature), engine_id="0")
    if temperature:
        with pytest.raises(RuntimeError, match="recorded no kept set"):
            VersionedEngine._record_kept_sets(engine, request, 1)
    else:
        VersionedEngine._record_kept_sets(engine, request, 1)
        assert request.kept_missing == 1 and request.kept == [None] and request.kept_log_mass == [0.0]


def test_a_transcript_keeps_its_turns_log_mass_even_when_no_turn_recorded_ids():
    """With sampling.keep_mask=false a turn brings no ids, only each token's log mass: the episode
    must keep it (its tokens train against their whole-vocabulary logprob), the observation's 0."""
    transcript = Transcript()
    turn = KeptSets.of([None, None], log_mass=[-0.5, -0.25])
    transcript.add_turn(Completion([1], [3, 4], [-1.0, -2.0], [0, 0], "", "stop", kept_sets=turn))
    transcript.add_observation([9])
    joined = transcript.joined_kept_sets()
    assert joined is not None and not joined.records_ids
    assert joined.log_mass.tolist() == [-0.5, -0.25, 0.0]
    plain = Transcript()
    plain.add_turn(Completion([1], [3], [-1.0], [0], "", "stop"))
    assert plain.joined_kept_sets() is None  # raw logprobs: nothing cut, nothing recorded
