"""Checks of a VersionedEngine on a real vLLM engine, stepped by hand: the CPU engine's tests
(tests/test_versioned_engine.py) and the GPU engine's (tests/test_gpu_engine.py) run the same ones."""

import math

import torch

from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.config import LoraConfig
from forge_async.models.peft import zero_adapter
from tests.support.vllm_engine import MAX_TOKENS, params, run_to_end, titan_logprobs, zeros_like

PROMPT = [11, 3, 1, 4, 13]
STEPS_BEFORE_SWAP = 4
# abort_resume: swap after RESUME_AT of RESUME_MAX tokens; prompt + prefix fill a 32-token block,
# which the prefix cache would serve again were it not reset
RESUME_AT = 30
RESUME_MAX = 40


def assert_a_swap_mid_decode_tags_each_token(llm, checkpoint, grouped: bool) -> None:
    """Requests running under v0 go on under v1 (inflight): each token carries the version that
    sampled it and that version's logprob. `grouped`: the 3 submits share their prompt and
    SamplingParams (one vLLM request with n=3)."""
    v0 = checkpoint.load_hf_state_dict()
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
    uniform = -math.log(checkpoint.shape.vocab_size)
    for request in requests:
        c = request.result
        assert c.versions == [0] * STEPS_BEFORE_SWAP + [1] * (MAX_TOKENS - STEPS_BEFORE_SWAP)
        assert c.version_spread == 1 and c.oldest_version == 0
        reference = titan_logprobs(checkpoint, v0, c.prompt_ids + c.token_ids)
        for t in range(STEPS_BEFORE_SWAP):  # v0 tokens: the v0 model's logprobs
            assert abs(c.logprobs[t] - reference[len(PROMPT) - 1 + t]) < 1e-4
        for t in range(STEPS_BEFORE_SWAP, MAX_TOKENS):  # v1 tokens: uniform
            assert abs(c.logprobs[t] - uniform) < 1e-5
    assert len({tuple(r.result.token_ids) for r in requests}) == 3  # three samples, not one thrice
    assert engine.swap_pauses.count == 1
    engine.swap(v0, version=0)  # leave the shared engine as we found it


def assert_a_swap_gives_the_new_weights_logprobs(engine: VersionedEngine, checkpoint, v1: dict) -> list:
    """After a swap to `v1`, the engine samples with v1 exactly as TorchTitan computes it (every
    tensor reached its layer and shard), not with v0. Leaves the engine on v0; returns the
    completions."""
    v0 = checkpoint.load_hf_state_dict()
    engine.swap(v1, version=1)
    requests = [engine.submit(PROMPT, params()) for _ in range(2)]
    run_to_end(engine)
    engine.swap(v0, version=0)  # leave the shared engine as we found it
    for request in requests:
        c = request.result
        assert c.versions == [1] * MAX_TOKENS
        reference = titan_logprobs(checkpoint, v1, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(a - b) for a, b in zip(c.logprobs, reference, strict=True)) < 1e-4
        v0_reference = titan_logprobs(checkpoint, v0, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(a - b) for a, b in zip(c.logprobs, v0_reference, strict=True)) > 1e-3
    return [r.result for r in requests]


def random_adapter(checkpoint, lora: LoraConfig, seed: int) -> dict[str, torch.Tensor]:
    """An adapter (PEFT names) large enough to move every logprob."""
    generator = torch.Generator().manual_seed(seed)
    zeros = zero_adapter(checkpoint.weight_shapes(), lora, torch.float32)
    return {name: 0.3 * torch.randn(t.shape, generator=generator) for name, t in zeros.items()}


def assert_an_adapter_swap_moves_running_requests(lora_llm, adapter_slot, checkpoint, mode: str) -> None:
    """Requests running with the zero adapter (the base model) go on with a new one, in flight or
    resumed from their prefix; a zero adapter serves the base model again after."""
    lora = adapter_slot.lora
    engine = VersionedEngine(lora_llm, mode, adapter=adapter_slot)
    base = checkpoint.load_hf_state_dict()
    requests = [engine.submit(PROMPT, params()) for _ in range(3)]
    for _ in range(STEPS_BEFORE_SWAP):
        engine.step()
    engine.swap(random_adapter(checkpoint, lora, seed=1), version=1)
    run_to_end(engine)
    for request in requests:
        c = request.result
        assert c.versions == [0] * STEPS_BEFORE_SWAP + [1] * (MAX_TOKENS - STEPS_BEFORE_SWAP)
        reference = titan_logprobs(checkpoint, base, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        # Before the swap: the zero adapter, i.e. the base model. After: the new adapter, in the same request
        # (in flight, or resumed from its prefix).
        assert max(abs(c.logprobs[t] - reference[t]) for t in range(STEPS_BEFORE_SWAP)) < 1e-4
        assert min(abs(c.logprobs[t] - reference[t]) for t in range(STEPS_BEFORE_SWAP, MAX_TOKENS)) > 1e-3
    assert engine.resumed_requests == (3 if mode == "abort_resume" else 0)
    assert engine.swap_pauses.count == 1

    # The base weights were never touched: a zero adapter serves the base model again.
    engine.swap(zero_adapter(checkpoint.weight_shapes(), lora, torch.float32), version=2)
    (request,) = [engine.submit(PROMPT, params())]
    run_to_end(engine)
    c = request.result
    reference = titan_logprobs(checkpoint, base, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
    assert c.versions == [2] * MAX_TOKENS
    assert max(abs(x - y) for x, y in zip(c.logprobs, reference)) < 1e-4


def assert_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights(resume_llm, checkpoint) -> None:
    """An abort_resume swap from all-zero weights to the checkpoint's: each request keeps its prefix
    (tokens, versions, logprobs) and its resumed tokens have the new weights' logprobs given the
    whole sequence, i.e. no KV of the zero weights (`resume_llm`: prefix caching on, 32-token
    blocks, so the cache would serve it were it not reset)."""
    v0 = checkpoint.load_hf_state_dict()
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
    uniform = -math.log(checkpoint.shape.vocab_size)
    for request, (prefix, prefix_logprobs) in zip(requests, prefixes):
        c = request.result
        assert len(c.token_ids) == RESUME_MAX and c.prompt_ids == PROMPT
        assert c.versions == [0] * RESUME_AT + [1] * (RESUME_MAX - RESUME_AT)
        assert c.token_ids[:RESUME_AT] == prefix and c.logprobs[:RESUME_AT] == prefix_logprobs
        assert all(abs(lp - uniform) < 1e-5 for lp in prefix_logprobs)
        # Resumed tokens: v0's logprobs given the whole sequence, i.e. no KV of the zero weights.
        reference = titan_logprobs(checkpoint, v0, c.prompt_ids + c.token_ids)[len(PROMPT) - 1 :]
        assert max(abs(c.logprobs[t] - reference[t]) for t in range(RESUME_AT, RESUME_MAX)) < 1e-4
    assert engine.resumed_requests == 3
