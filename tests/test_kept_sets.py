"""Keep sampling mask on a real vLLM engine: each token's recorded kept set is what vLLM's own
top-k / top-p code keeps of the same model's logits (computed here by the trainer's TorchTitan
model), through abort-and-resume swaps and multi-turn episodes; the trainer's log-probabilities
over those sets equal the generator's, where over the whole vocabulary they do not."""

import asyncio

import pytest
import torch

from forge_async.actors.generator import sampling_params
from forge_async.data.batch import pack_episodes
from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.generation.config import SamplingConfig
from forge_async.generation.kept_set_capture import KeptSetCapture
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.losses.grpo import response_logprobs
from forge_async.models.titan import load_frozen_model
from forge_async.tasks.task import Prompt
from tests.support.digits import PAD_ID, TOKENIZER
from tests.support.kept_sets import expected_sets, recorded_sets
from tests.support.vllm_engine import run_to_end, start_llm

pytestmark = pytest.mark.procs

PROMPT = [11, 3, 1, 4, 13]
TEMPERATURE = 0.8
SETTINGS = {
    "top_k 6": dict(top_k=6),
    "top_p 0.8": dict(top_p=0.8),
    "min_p 0.8": dict(min_p=0.8),  # the tiny random model is near uniform
    "all three": dict(top_k=8, top_p=0.9, min_p=0.1),
}


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    """An engine as a generator with sampling.keep_mask builds it (abort_resume: prefix caching)."""
    return start_llm(tiny_checkpoint, "abort_resume", block_size=32, **KeptSetCapture.llm_kwargs())


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_frozen_model(tiny_checkpoint)


def sampling(**truncation) -> SamplingConfig:
    return SamplingConfig(temperature=TEMPERATURE, max_tokens=12, **truncation)


def engine_for(llm, cap: int = 1024) -> VersionedEngine:
    return VersionedEngine(llm, "abort_resume", kept_sets=KeptSetCapture(cap))


def assert_trainer_matches_generator(model, completions: list[Completion]) -> None:
    """The trainer's logprobs over the kept sets are the generator's (the distribution it sampled
    from); over the whole vocabulary they are higher-entropy and differ, and equal the generator's
    made whole by each token's log mass."""
    batch = pack_episodes([Episode(c, 0.0, 0.0) for c in completions], PAD_ID)
    with torch.no_grad():
        logprobs, _, unmasked, _ = response_logprobs(model, batch, TEMPERATURE)
    mask = batch.response_mask.bool()
    behaviour = batch.behaviour_logprobs[mask]
    assert (logprobs[mask] - behaviour).abs().max() < 1e-4
    assert (unmasked[mask] - behaviour).abs().max() > 1e-2
    assert (unmasked[mask] <= behaviour + 1e-5).all()  # a truncated distribution puts more on each kept token
    whole = torch.tensor([lp for c in completions for lp, m in zip(c.whole_logprobs, c.model_mask) if m])
    assert (unmasked[mask] - whole).abs().max() < 1e-4


@pytest.mark.parametrize("truncation", SETTINGS.values(), ids=SETTINGS.keys())
def test_each_kept_set_is_what_vllm_keeps_of_the_same_logits(llm, model, tiny_checkpoint, truncation):
    config = sampling(**truncation)
    engine = engine_for(llm)
    requests = [engine.submit(PROMPT, sampling_params(config)) for _ in range(4)]
    run_to_end(engine)
    completions = [r.result for r in requests]
    for c in completions:
        assert recorded_sets(c) == expected_sets(model, c, config)
        assert c.kept_sets.over_cap == 0
    sizes = [s for c in completions for s in c.kept_sets.sizes.tolist()]
    assert 1 < sum(sizes) / len(sizes) < tiny_checkpoint.shape.vocab_size  # truncated, not trivially
    assert_trainer_matches_generator(model, completions)


def test_sets_over_the_cap_are_counted_and_left_to_the_whole_vocabulary(llm, model):
    config = sampling(top_p=0.95)
    engine = engine_for(llm, cap=3)
    request = engine.submit(PROMPT, sampling_params(config))
    run_to_end(engine)
    c = request.result
    expected = expected_sets(model, c, config)
    over = [s is not None and len(s) > 3 for s in expected]
    assert c.kept_sets.over_cap == sum(over) > 0
    assert recorded_sets(c) == [None if o else s for s, o in zip(expected, over)]


def test_an_abort_and_resume_swap_keeps_the_prefix_sets_and_records_the_rest(llm, model, tiny_checkpoint):
    config = sampling(top_k=6, top_p=0.9)
    engine = engine_for(llm)
    requests = [engine.submit(PROMPT, sampling_params(config)) for _ in range(3)]
    for _ in range(5):
        engine.step()
    prefixes = [list(r.kept) for r in requests]
    engine.swap(tiny_checkpoint.load_hf_state_dict(), version=1)  # the same weights, resubmitted
    run_to_end(engine)
    assert engine.resumed_requests == 3
    for r, prefix in zip(requests, prefixes):
        c = r.result
        assert 1 in c.versions and 0 in c.versions
        assert recorded_sets(c) == expected_sets(model, c, config)
        assert all((a == b).all() for a, b in zip(prefix, r.kept))
    assert_trainer_matches_generator(model, [r.result for r in requests])


class Echo:
    """Replies to each turn with its digits reversed; done after two turns."""

    def reset(self, prompt: Prompt) -> str:
        return prompt.text

    def step(self, turn):
        from forge_async.envs.environment import EnvStep

        return EnvStep(observation=turn.text[::-1] or "0", reward=0.0, done=turn.index == 1)


def test_a_multi_turn_episode_carries_its_turns_sets_and_none_for_the_environment(llm, model):
    config = sampling(top_k=6, min_p=0.1)
    engine = engine_for(llm)

    async def generate(prompt_ids: list[int], turn: SamplingConfig) -> Completion:
        request = engine.submit(prompt_ids, sampling_params(turn))
        run_to_end(engine)
        return request.result

    runner = EnvRunner(Echo, TOKENIZER, config, EpisodeLimits(4, 48, 64), timeout_s=5.0)
    c = asyncio.run(runner.play(Prompt([], "", text="5"), generate))
    assert c.turns == 2 and ENV_TOKEN in c.versions
    recorded = recorded_sets(c)
    assert [s is None for s in recorded] == [v == ENV_TOKEN for v in c.versions]
    assert recorded == expected_sets(model, c, config)
    assert_trainer_matches_generator(model, [c])
