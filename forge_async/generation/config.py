"""The generator's and sampling's config sections (light: read before vLLM is imported)."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, Range, check_choice, check_range
from forge_async.errors import ConfigError
from forge_async.generation.versioned_engine import SWAP_MODES
from forge_async.models.shape import ModelShape

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class GeneratorConfig:
    count: int = 1  # generator actors (one proc each)
    max_restarts: int = 3  # generator procs respawned after a crash, over the run; then it stops
    max_model_len: int | None = None  # default: the checkpoint's max_position_embeddings
    dtype: str | None = None  # float32 | bfloat16; null = trainer.dtype (composed alone: the checkpoint's)
    seed: int = 0
    swap_mode: str = "inflight"  # inflight | drain | abort_resume (see generation/versioned_engine.py)
    # Generate calls run at once, their requests in one engine batch; 0: no limit. 1 (one call
    # after another, first come first served) suits single-turn rollouts, where a call is a
    # rollout's samples: the first call's come back first. Multi-turn episodes send a call per
    # turn of a few episodes: 0, so that they share the engine's steps. null: the run sets it
    # so (GRPOConfig); a generator composed alone takes 1.
    calls_at_once: int | None = None
    # vLLM CPU OpenMP thread binding, e.g. "0" (core 0), "0-3", "auto", "nobind".
    cpu_threads_bind: str = "auto"
    # Share of its GPU's memory vLLM may take (weights, activations, KV cache). kv_cache_gib,
    # when set, sizes the KV cache instead. (vLLM's CPU build reads it as a share of RAM.)
    gpu_memory_utilization: float = 0.5
    # KV cache size in GiB; null = vLLM's default (on CPU it reserves several GiB per engine).
    kv_cache_gib: float | None = None
    # vLLM without CUDA graphs nor torch.compile; null = the platform's default (true on CPU,
    # false on GPU). See generator_platform.py.
    enforce_eager: bool | None = None
    # vLLM's torch.compile of the model; null = the platform's default (off on CPU, on on GPU).
    compile: bool | None = None
    # CPU only: plain = linear weights kept as loaded (a swap copies them in place), packed =
    # vLLM's oneDNN-packed weights (faster decode for larger models; a swap repacks every
    # layer). See generation/engine_weights.py.
    cpu_weights: str = "plain"

    def __post_init__(self) -> None:
        check_range("generator.count", self.count, AT_LEAST_1)
        if self.dtype is not None:
            check_choice("generator.dtype", self.dtype, ("float32", "bfloat16", "float16"))
        check_range("generator.max_restarts", self.max_restarts, AT_LEAST_0)
        check_range(
            "generator.max_model_len", self.max_model_len, AT_LEAST_1,
            nullable=True, note="null = the checkpoint's context length",
        )
        # vLLM seeds numpy with it, which takes 32-bit unsigned seeds only.
        check_range("generator.seed", self.seed, Range(0, 2**32 - 1))
        check_choice("generator.swap_mode", self.swap_mode, SWAP_MODES)
        check_range("generator.calls_at_once", self.calls_at_once, AT_LEAST_0, nullable=True, note="0 = no limit")
        check_choice("generator.cpu_weights", self.cpu_weights, ("plain", "packed"))
        check_range("generator.gpu_memory_utilization", self.gpu_memory_utilization, FRACTION)
        check_range(
            "generator.kv_cache_gib", self.kv_cache_gib, POSITIVE, nullable=True, note="null = vLLM's default"
        )
        if self.enforce_eager and self.compile:
            # vLLM's enforce_eager sets its compilation mode to none, whatever was asked.
            raise ConfigError(
                "generator.compile=true with generator.enforce_eager=true: eager mode turns vLLM's "
                "torch.compile off; set generator.enforce_eager=false (or null)"
            )

    def kv_cache_bytes(self, shape: ModelShape, max_model_len: int, dtype: str) -> int | None:
        """kv_cache_gib in bytes (None: vLLM sizes it), checked to hold one sequence of the
        full context: vLLM's own error for a cache too small names neither key."""
        if self.kv_cache_gib is None:
            return None
        size = int(self.kv_cache_gib * 2**30)
        per_token = shape.kv_cache_bytes_per_token(_DTYPE_BYTES.get(dtype, 2))  # a lower bound for others
        if size < per_token * max_model_len:
            raise ConfigError(
                f"generator.kv_cache_gib={self.kv_cache_gib} holds {size // per_token} tokens of this model "
                f"({per_token} bytes each in {dtype}), fewer than one sequence of its context "
                f"(generator.max_model_len={max_model_len}); raise generator.kv_cache_gib to at least "
                f"{per_token * max_model_len / 2**30:.4g} or lower generator.max_model_len"
            )
        return size


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0  # EOS is not sampled before this many tokens (long completions)

    def __post_init__(self) -> None:
        check_range("sampling.temperature", self.temperature, AT_LEAST_0, note="0 = greedy")
        check_range("sampling.top_p", self.top_p, FRACTION)
        check_range("sampling.max_tokens", self.max_tokens, AT_LEAST_1)
        check_range("sampling.min_tokens", self.min_tokens, Range(0, self.max_tokens), note="<= sampling.max_tokens")
