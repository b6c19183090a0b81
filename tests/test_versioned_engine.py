"""Per-token policy versions through weight swaps, on a real vLLM engine stepped by hand."""

import math

import pytest
import torch

from forge_async.generation.adapter_slot import AdapterSlot
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.config import LoraConfig
from forge_async.models.peft import zero_adapter
from forge_async.models.titan import build_titan_model, state_dict_adapter
from forge_async.losses.grpo import token_logprobs
from tests.support.vllm_engine import MAX_TOKENS, params, perturbed, run_to_end, start_llm

pytestmark = pytest.mark.procs

PROMPT = [11, 3, 1, 4, 13]
STEPS_BEFORE_SWAP = 4
LORA = LoraConfig(rank=4)
# abort_resume: swap after RESUME_AT of RESUME_MAX tokens; prompt + prefix fill a 32-token block,
# which the prefix cache would serve again were it not reset
RESUME_AT = 30
RESUME_MAX = 40


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    return start_llm(tiny_checkpoint)


@pytest.fixture(scope="module")
def adapter_slot(tiny_checkpoint) -> AdapterSlot:
    return AdapterSlot(LORA, tiny_checkpoint, torch.float32)


@pytest.fixture(scope="module")
def lora_llm(tiny_checkpoint, adapter_slot):
    """An engine serving the checkpoint + one LoRA adapter (a second engine in this process)."""
    return start_llm(tiny_checkpoint, **adapter_slot.llm_kwargs())


@pytest.fixture(scope="module")
def resume_llm(tiny_checkpoint):
    """An engine with prefix caching, as abort_resume runs it. Blocks of 32 tokens (vLLM's CPU
    default is 128, longer than the tiny model's context), so prompt + prefix fill a block."""
    return start_llm(tiny_checkpoint, "abort_resume", block_size=32)


def titan_logprobs(checkpoint, hf_state_dict, sequence: list[int]) -> list[float]:
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(hf_state_dict))
    tokens = torch.tensor([sequence])
    with torch.no_grad():
        return token_logprobs(model(tokens), tokens)[0].tolist()


def zeros_like(state_dict):
    return {name: torch.zeros_like(t) for name, t in state_dict.items()}


@pytest.mark.parametrize("grouped", [False, True], ids=["3 requests", "1 request of 3 samples"])
def test_inflight_swap_tags_each_token_with_the_weights_that_sampled_it(llm, tiny_checkpoint, grouped):
    """Also when the 3 submits share their prompt and SamplingParams: one vLLM request with n=3."""
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(llm, "inflight")
    shared = params()
    requests = [engine.submit(PROMPT, shared if grouped else params()) for _ in range(3)]
    engine.step()
    assert len(engine._running) == (1 if grouped else 3)
    for _ in range(STEPS_BEFORE_SWAP - 1):
        engine.step()
    # v1 = all-zero weights: every logit is 0, whatever KV the running requests carry,
    # so a token sampled by v1 has logprob exactly -log(vocab).
    engine.swap(zeros_like(v0), version=1)
    run_to_end(engine)
    uniform = -math.log(tiny_checkpoint.shape.vocab_size)
    for request in requests:
        c = request.result
        assert c.versions == [0] * STEPS_BEFORE_SWAP + [1] * (MAX_TOKENS - STEPS_BEFORE_SWAP)
        assert c.version_spread == 1 and c.oldest_version == 0
        reference = titan_logprobs(tiny_checkpoint, v0, c.prompt_ids + c.token_ids)
        for t in range(STEPS_BEFORE_SWAP):  # v0 tokens: the v0 model's logprobs
            assert abs(c.logprobs[t] - reference[len(PROMPT) - 1 + t]) < 1e-4
        for t in range(STEPS_BEFORE_SWAP, MAX_TOKENS):  # v1 tokens: uniform
            assert abs(c.logprobs[t] - uniform) < 1e-5
    assert len({tuple(r.result.token_ids) for r in requests}) == 3  # three samples, not one thrice
    assert engine.swap_pauses.count == 1
    engine.swap(v0, version=0)  # leave the shared engine as we found it


@pytest.fixture(scope="module")
def packed_llm(tiny_checkpoint):
    """An engine with vLLM's oneDNN-packed linear layers (generator.cpu_weights=packed)."""
    return start_llm(tiny_checkpoint, cpu_weights="packed")


@pytest.mark.parametrize("cpu_weights", ["plain", "packed"])
def test_a_swap_to_new_weights_gives_their_logprobs(llm, packed_llm, tiny_checkpoint, cpu_weights):
    """Plain weights are copied in place, packed ones reloaded by vLLM: both sample with the new
    weights exactly as TorchTitan computes them (every tensor reached its layer and shard)."""
    if torch.cuda.is_available():
        pytest.skip("cpu_weights is a CPU engine's setting")
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(llm if cpu_weights == "plain" else packed_llm, "inflight")
    assert engine.loads_in_place == (cpu_weights == "plain")
    v1 = perturbed(v0, seed=1)
    engine.swap(v1, version=1)
    requests = [engine.submit(PROMPT, params()) for _ in range(2)]
    run_to_end(engine)
    engine.swap(v0, version=0)  # leave the shared engine as we found it
    for request in requests:
        c = request.result
        assert c.versions == [1] * MAX_TOKENS
        reference = titan_logprobs(tiny_checkpoint, v1, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(a - b) for a, b in zip(c.logprobs, reference, strict=True)) < 1e-4
        v0_reference = titan_logprobs(tiny_checkpoint, v0, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(a - b) for a, b in zip(c.logprobs, v0_reference, strict=True)) > 1e-3


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


def random_adapter(checkpoint, seed: int) -> dict[str, torch.Tensor]:
    """An adapter (PEFT names) large enough to move every logprob."""
    generator = torch.Generator().manual_seed(seed)
    zeros = zero_adapter(checkpoint.weight_shapes(), LORA, torch.float32)
    return {name: 0.3 * torch.randn(t.shape, generator=generator) for name, t in zeros.items()}


@pytest.mark.parametrize("mode", ["inflight", "abort_resume"])
def test_adapter_swap_moves_running_requests_to_the_new_adapter(lora_llm, adapter_slot, tiny_checkpoint, mode):
    engine = VersionedEngine(lora_llm, mode, adapter=adapter_slot)
    base = tiny_checkpoint.load_hf_state_dict()
    requests = [engine.submit(PROMPT, params()) for _ in range(3)]
    for _ in range(STEPS_BEFORE_SWAP):
        engine.step()
    engine.swap(random_adapter(tiny_checkpoint, seed=1), version=1)
    run_to_end(engine)
    for request in requests:
        c = request.result
        assert c.versions == [0] * STEPS_BEFORE_SWAP + [1] * (MAX_TOKENS - STEPS_BEFORE_SWAP)
        reference = titan_logprobs(tiny_checkpoint, base, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        # Before the swap: the zero adapter, i.e. the base model. After: the new adapter, in the same request
        # (in flight, or resumed from its prefix).
        assert max(abs(c.logprobs[t] - reference[t]) for t in range(STEPS_BEFORE_SWAP)) < 1e-4
        assert min(abs(c.logprobs[t] - reference[t]) for t in range(STEPS_BEFORE_SWAP, MAX_TOKENS)) > 1e-3
    assert engine.resumed_requests == (3 if mode == "abort_resume" else 0)
    assert engine.swap_pauses.count == 1

    # The base weights were never touched: a zero adapter serves the base model again.
    engine.swap(zero_adapter(tiny_checkpoint.weight_shapes(), LORA, torch.float32), version=2)
    (request,) = [engine.submit(PROMPT, params())]
    run_to_end(engine)
    c = request.result
    reference = titan_logprobs(tiny_checkpoint, base, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
    assert c.versions == [2] * MAX_TOKENS
    assert max(abs(x - y) for x, y in zip(c.logprobs, reference)) < 1e-4


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
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(resume_llm, "abort_resume")
    # Version 0 = all-zero weights: uniform logprobs, and a KV cache of zeros.
    engine.swap(zeros_like(v0), version=0)
    sampling = params(max_tokens=RESUME_MAX, min_tokens=RESUME_MAX, ignore_eos=False)
    requests = [engine.submit(PROMPT, sampling) for _ in range(3)]
    for _ in range(RESUME_AT):
        engine.step()
    prefixes = [(list(r.token_ids), list(r.logprobs)) for r in requests]
    engine.swap(v0, version=1)
    run_to_end(engine)
    uniform = -math.log(tiny_checkpoint.shape.vocab_size)
    for request, (prefix, prefix_logprobs) in zip(requests, prefixes):
        c = request.result
        assert len(c.token_ids) == RESUME_MAX and c.prompt_ids == PROMPT
        assert c.versions == [0] * RESUME_AT + [1] * (RESUME_MAX - RESUME_AT)
        assert c.token_ids[:RESUME_AT] == prefix and c.logprobs[:RESUME_AT] == prefix_logprobs
        assert all(abs(lp - uniform) < 1e-5 for lp in prefix_logprobs)
        # Resumed tokens: v0's logprobs given the whole sequence, i.e. no KV of the zero weights.
        reference = titan_logprobs(tiny_checkpoint, v0, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(c.logprobs[t] - reference[t]) for t in range(RESUME_AT, RESUME_MAX)) < 1e-4
    assert engine.resumed_requests == 3
