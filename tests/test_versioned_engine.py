"""Per-token policy versions through weight swaps, on a real vLLM engine stepped by hand."""

import math

import pytest
import torch

from forge_async.actors.generator_config import GeneratorConfig
from forge_async.actors.generator_platform import resolve_platform
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.titan import build_titan_model, state_dict_adapter
from forge_async.losses.grpo import token_logprobs

PROMPT = [11, 3, 1, 4, 13]
STEPS_BEFORE_SWAP = 4
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    """The generator's engine, built in this test process the way a generator proc builds it.
    Its environment is set only while it starts: procs spawned later inherit this process's
    (vLLM pinning pytest's threads to a core, or dynamo off in a trainer)."""
    platform = resolve_platform(GeneratorConfig(), on_gpu=torch.cuda.is_available())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        for key, value in platform.env().items():
            env.setenv(key, value)
        from vllm import LLM

        return LLM(
            model=str(tiny_checkpoint.path),
            dtype="float32",
            max_model_len=tiny_checkpoint.shape.max_seq_len,
            kv_cache_memory_bytes=2**28,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs("inflight"),
        )


def params():
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0, output_kind=RequestOutputKind.DELTA,
        detokenize=False,
    )


def titan_logprobs(checkpoint, hf_state_dict, sequence: list[int]) -> list[float]:
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(hf_state_dict))
    tokens = torch.tensor([sequence])
    with torch.no_grad():
        return token_logprobs(model(tokens), tokens)[0].tolist()


def zeros_like(state_dict):
    return {name: torch.zeros_like(t) for name, t in state_dict.items()}


def test_inflight_swap_tags_each_token_with_the_weights_that_sampled_it(llm, tiny_checkpoint):
    v0 = tiny_checkpoint.load_hf_state_dict()
    engine = VersionedEngine(llm, "inflight")
    requests = [engine.submit(PROMPT, params()) for _ in range(3)]
    for _ in range(STEPS_BEFORE_SWAP):
        engine.step()
    # v1 = all-zero weights: every logit is 0, whatever KV the running requests carry,
    # so a token sampled by v1 has logprob exactly -log(vocab).
    engine.swap(zeros_like(v0), version=1)
    while engine.has_work:
        engine.step()
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
    assert len(engine.swap_pauses_ms) == 1
    engine.swap(v0, version=0)  # leave the shared engine as we found it


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
    assert engine.swap_pauses_ms == []  # the swap ran with nothing in flight
    while engine.has_work:
        engine.step()
    assert second.result.versions == [1] * MAX_TOKENS
    engine.swap(v0, version=0)
