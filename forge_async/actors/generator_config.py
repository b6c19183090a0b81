"""The generator's and sampling's config sections (light: read before vLLM is imported)."""

from dataclasses import dataclass

from forge_async.config_checks import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, Range, check_range
from forge_async.errors import ConfigError
from forge_async.generation.versioned_engine import SWAP_MODES


@dataclass
class GeneratorConfig:
    count: int = 1  # generator actors (one proc each)
    max_restarts: int = 3  # generator procs respawned after a crash, over the run; then it stops
    max_model_len: int | None = None  # default: the checkpoint's max_position_embeddings
    dtype: str = "float32"
    seed: int = 0
    swap_mode: str = "inflight"  # inflight | drain (see generation/versioned_engine.py)
    # vLLM CPU OpenMP thread binding, e.g. "0" (core 0), "0-3", "auto", "nobind".
    cpu_threads_bind: str = "auto"
    gpu_memory_utilization: float = 0.5
    # KV cache size in GiB; null = vLLM's default (on CPU it reserves several GiB per engine).
    kv_cache_gib: float | None = None

    def __post_init__(self) -> None:
        check_range("generator.count", self.count, AT_LEAST_1)
        check_range("generator.max_restarts", self.max_restarts, AT_LEAST_0)
        check_range(
            "generator.max_model_len", self.max_model_len, AT_LEAST_1,
            nullable=True, note="null = the checkpoint's context length",
        )
        # vLLM seeds numpy with it, which takes 32-bit unsigned seeds only.
        check_range("generator.seed", self.seed, Range(0, 2**32 - 1))
        if self.swap_mode not in SWAP_MODES:
            raise ConfigError(f"generator.swap_mode={self.swap_mode!r}: one of {', '.join(SWAP_MODES)}")
        check_range("generator.gpu_memory_utilization", self.gpu_memory_utilization, FRACTION)
        check_range(
            "generator.kv_cache_gib", self.kv_cache_gib, POSITIVE, nullable=True, note="null = vLLM's default"
        )


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16

    def __post_init__(self) -> None:
        check_range("sampling.temperature", self.temperature, AT_LEAST_0, note="0 = greedy")
        check_range("sampling.top_p", self.top_p, FRACTION)
        check_range("sampling.max_tokens", self.max_tokens, AT_LEAST_1)
