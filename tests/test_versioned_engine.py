"""Per-token policy versions through weight swaps, on a real vLLM engine stepped by hand."""

import pytest

from forge_async.generation.versioned_engine import VersionedEngine
from tests.support.engine_checks import (
    PROMPT,
    RESUME_AT,
    RESUME_MAX,
    STEPS_BEFORE_SWAP,
    assert_a_swap_gives_the_new_weights_logprobs,
    assert_a_swap_mid_decode_tags_each_token,
    assert_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights,
    assert_an_adapter_swap_moves_running_requests,
)
from tests.support.vllm_engine import (
    MAX_TOKENS,
    ON_GPU,
    params,
    perturbed,
    run_to_end,
    start_llm,
    titan_logprobs,
    zeros_like,
)

pytestmark = pytest.mark.procs

# a prompt that fills a 32-token KV block, which the prefix cache can serve
LONG_PROMPT = [11] + [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3] * 2 + [13]


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    return start_llm(tiny_checkpoint)


@pytest.fixture(scope="module")
def resume_llm(tiny_checkpoint):
    """An engine with prefix caching, as abort_resume runs it. Blocks of 32 tokens (vLLM's CPU
    default is 128, longer than the tiny model's context), so prompt + prefix fill a block."""
    return start_llm(tiny_checkpoint, "abort_resume", block_size=32)


@pytest.mark.parametrize("grouped", [False, True], ids=["3 requests", "1 request of 3 samples"])
def test_inflight_swap_tags_each_token_with_the_weights_that_sampled_it(llm, tiny_checkpoint, grouped):
    """Also when the 3 submits share their prompt and SamplingParams: one vLLM request with n=3."""
    assert_a_swap_mid_decode_tags_each_token(llm, tiny_checkpoint, grouped)


@pytest.fixture(scope="module")
def packed_llm(tiny_checkpoint):
    """An engine with vLLM's oneDNN-packed linear layers (generator.cpu_weights=packed)."""
    return start_llm(tiny_checkpoint, cpu_weights="packed")


@pytest.mark.parametrize("cpu_weights", ["plain", "packed"])
def test_a_swap_to_new_weights_gives_their_logprobs(request, tiny_checkpoint, cpu_weights):
    """Plain weights are copied in place, packed ones reloaded by vLLM: both sample with the new
    weights exactly as TorchTitan computes them (every tensor reached its layer and shard). A GPU
    engine (cpu_weights is a CPU engine's setting) reloads them layer by layer, as packed ones."""
    if ON_GPU and cpu_weights == "packed":
        pytest.skip("cpu_weights is a CPU engine's setting: the plain case covers the GPU engine")
    engine = VersionedEngine(request.getfixturevalue("llm" if cpu_weights == "plain" else "packed_llm"), "inflight")
    assert engine.loads_in_place == (cpu_weights == "plain" and not ON_GPU)
    assert_a_swap_gives_the_new_weights_logprobs(
        engine, tiny_checkpoint, perturbed(tiny_checkpoint.load_hf_state_dict(), seed=1)
    )


def test_the_samples_of_one_request_finish_each_on_its_own(llm):
    """A group's samples end at different lengths (EOS sampled); each is handed over when it ends."""
    engine = VersionedEngine(llm, "inflight")
    shared = params(ignore_eos=False, temperature=1.0)
    done: list[int] = []
    requests = [engine.submit(PROMPT, shared, on_done=lambda c, i=i: done.append(i)) for i in range(16)]
    run_to_end(engine)
    assert sorted(done) == list(range(16))
    eos = llm.get_tokenizer().eos_token_id
    for request in requests:
        c = request.result
        assert len(c.token_ids) == len(c.logprobs) == len(c.versions) >= 1
        assert (c.finish_reason, c.token_ids[-1] == eos) in (("stop", True), ("length", False)), c
    assert len({len(r.result.token_ids) for r in requests}) > 1


def test_drain_mode_holds_new_requests_until_the_swap(llm, tiny_checkpoint):
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(llm, "drain")
    first = engine.submit(PROMPT, params())
    engine.step()
    engine.draining = True  # a new version is waiting
    second = engine.submit(PROMPT, params())
    while engine.running:
        engine.step()
    assert first.result is not None and first.result.versions == [0] * MAX_TOKENS
    assert second.token_ids == []  # not admitted while draining
    engine.swap(zeros_like(v0), version=1)
    assert engine.swap_pauses.count == 0  # the swap ran with nothing in flight
    run_to_end(engine)
    assert second.result.versions == [1] * MAX_TOKENS
    engine.swap(v0, version=0)


@pytest.mark.parametrize("mode", ["inflight", "abort_resume"])
def test_adapter_swap_moves_running_requests_to_the_new_adapter(lora_llm, adapter_slot, tiny_checkpoint, mode):
    assert_an_adapter_swap_moves_running_requests(lora_llm, adapter_slot, tiny_checkpoint, mode)


def test_abort_resume_with_unchanged_weights_is_the_uninterrupted_greedy_completion(resume_llm, tiny_checkpoint):
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(resume_llm, "abort_resume")
    greedy = params(temperature=0.0, max_tokens=RESUME_MAX)
    uninterrupted = engine.submit(PROMPT, greedy)
    run_to_end(engine)
    resumed = [engine.submit(PROMPT, greedy) for _ in range(2)]
    for _ in range(RESUME_AT):
        engine.step()
    engine.swap(v0, version=1)
    run_to_end(engine)
    expected = uninterrupted.result
    for request in resumed:
        c = request.result
        assert c.prompt_ids == PROMPT
        assert c.token_ids == expected.token_ids
        assert c.versions == [0] * RESUME_AT + [1] * (RESUME_MAX - RESUME_AT)
        assert max(abs(x - y) for x, y in zip(c.logprobs, expected.logprobs)) < 1e-4
    assert (engine.resumed_requests, engine.resumed_prefix_tokens) == (2, 2 * (len(PROMPT) + RESUME_AT))
    assert engine.swap_pauses.count == 1


def test_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights_alone(resume_llm, tiny_checkpoint):
    assert_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights(resume_llm, tiny_checkpoint)


def test_a_swap_made_with_requests_running_still_resets_the_prefix_cache(resume_llm, tiny_checkpoint):
    """vLLM resets its prefix cache only while no request holds KV blocks; else it returns False and
    keeps every cached prefix. A drain-mode swap made with a request still running (its caller did
    not drain) preempts it to reset the cache, and counts it: the running request's later tokens and
    a new request for the same prompt (whose first block the cache would serve) are computed with
    the new weights alone, no KV of the old ones."""
    v0 = tiny_checkpoint.load_hf_state_dict()
    v1 = perturbed(v0, seed=2)
    engine = VersionedEngine(resume_llm, "drain")
    running = engine.submit(LONG_PROMPT, params())
    for _ in range(STEPS_BEFORE_SWAP):
        engine.step()
    assert engine.running and len(running.token_ids) == STEPS_BEFORE_SWAP
    engine.swap(v1, version=1)
    assert engine.preempting_resets == 1
    again = engine.submit(LONG_PROMPT, params())
    run_to_end(engine)
    engine.swap(v0, version=0)  # idle: a plain reset, and the shared engine left as we found it
    assert engine.preempting_resets == 1
    for request, old_tokens in ((running, STEPS_BEFORE_SWAP), (again, 0)):
        c = request.result
        assert c.versions == [0] * old_tokens + [1] * (MAX_TOKENS - old_tokens)
        reference = titan_logprobs(tiny_checkpoint, v1, c.prompt_ids + c.token_ids)[len(LONG_PROMPT) - 1 :]
        assert max(abs(c.logprobs[t] - reference[t]) for t in range(old_tokens, MAX_TOKENS)) < 1e-4
