"""The generator's vLLM engine in the test process, stepped by hand, and weights to swap into it."""

import pytest
import torch

from forge_async.generation.config import GeneratorConfig
from forge_async.generation.engine_weights import plain_cpu_weights
from forge_async.generation.platform import resolve_platform
from forge_async.generation.versioned_engine import VersionedEngine

MAX_TOKENS = 10


def start_llm(checkpoint, swap_mode: str = "inflight", cpu_weights: str = "plain", **options):
    """The generator's engine, built in this test process the way a generator proc builds it.
    Its environment is set only while it starts: procs spawned later inherit this process's
    (vLLM pinning pytest's threads to a core, or dynamo off in a trainer)."""
    platform = resolve_platform(GeneratorConfig(cpu_weights=cpu_weights), on_gpu=torch.cuda.is_available())
    with pytest.MonkeyPatch.context() as env, plain_cpu_weights(platform.plain_weights):
        env.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        for key, value in platform.env().items():
            env.setenv(key, value)
        from vllm import LLM

        return LLM(
            model=str(checkpoint.path),
            dtype="float32",
            max_model_len=checkpoint.shape.max_seq_len,
            kv_cache_memory_bytes=2**28,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs(swap_mode),
            **options,
        )


def params(**options):
    """Sampling for MAX_TOKENS tokens (EOS ignored unless `options` say otherwise)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    options = {"max_tokens": MAX_TOKENS, "ignore_eos": True} | options
    return SamplingParams(logprobs=0, output_kind=RequestOutputKind.DELTA, detokenize=False, **options)


def run_to_end(engine: VersionedEngine) -> None:
    while engine.has_work:
        engine.step()


def perturbed(state_dict, seed: int):
    generator = torch.Generator().manual_seed(seed)
    return {name: t + 0.05 * torch.randn(t.shape, generator=generator) for name, t in state_dict.items()}
