"""The generator's vLLM engine in the test process, stepped by hand, and weights to swap into it."""

import pytest
import torch

from forge_async.generation.config import GeneratorConfig
from forge_async.generation.engine_weights import plain_cpu_weights
from forge_async.generation.platform import ModelRunner, resolve_platform
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.losses.grpo import token_logprobs
from forge_async.models.titan import build_titan_model, state_dict_adapter

MAX_TOKENS = 10
ON_GPU = torch.cuda.is_available()
# Each engine's share of the GPU: vLLM refuses to start one if less than its share is free, and a
# test process builds several (their KV caches are sized by kv_cache_memory_bytes, not by it).
GPU_SHARE = 0.1


def start_llm(
    checkpoint, swap_mode: str = "inflight", cpu_weights: str = "plain", runner: ModelRunner | None = None, **options
):
    """The generator's engine, built in this test process the way a generator proc builds it, on
    the model runner the platform sets (V1) or `runner`'s (generation/platform.py, model_runner).
    Its environment is set only while it starts: procs spawned later inherit this process's
    (vLLM pinning pytest's threads to a core, or dynamo off in a trainer)."""
    platform = resolve_platform(GeneratorConfig(cpu_weights=cpu_weights), on_gpu=ON_GPU)
    with pytest.MonkeyPatch.context() as env, plain_cpu_weights(platform.plain_weights):
        env.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        for key, value in (platform.env() | (runner.env() if runner else {})).items():
            env.setenv(key, value)
        import vllm.envs
        from vllm import LLM

        gpu = {}
        if platform.on_gpu:
            # An engine started earlier in this process froze vLLM's reading of the environment
            # (vllm/envs.py, enable_envs_cache): read afresh, for a GPU MoE engine's V2 runner.
            vllm.envs.disable_envs_cache()
            gpu = {"gpu_memory_utilization": GPU_SHARE}
        return LLM(
            model=str(checkpoint.path),
            dtype="float32",
            max_model_len=checkpoint.shape.max_seq_len,
            kv_cache_memory_bytes=2**28,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs(swap_mode),
            **(gpu | options),
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


def zeros_like(state_dict):
    """All-zero weights: every logit 0, whatever the KV cache holds (a uniform distribution)."""
    return {name: torch.zeros_like(t) for name, t in state_dict.items()}


def titan_logprobs(checkpoint, hf_state_dict, sequence: list[int]) -> list[float]:
    """TorchTitan's logprob of each token of `sequence` after the first, under `hf_state_dict`."""
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(hf_state_dict))
    tokens = torch.tensor([sequence])
    with torch.no_grad():
        return token_logprobs(model(tokens), tokens)[0].tolist()
