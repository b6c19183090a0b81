"""The generator's and sampling's config sections (light: read before vLLM is imported)."""

from dataclasses import dataclass
from typing import Literal

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, FRACTION, POSITIVE, Range, check_range
from forge_async.errors import ConfigError
from forge_async.generation.versioned_engine import SwapMode
from forge_async.models.shape import ModelShape

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class GeneratorConfig:
    count: int = key(1, help="generator actors, one proc and one vLLM engine each", accepts=">= 1")
    max_restarts: int = key(
        3,
        help=(
            "crashed generator procs respawned over the run; past it the run stops cleanly "
            "([checkpoints.md](checkpoints.md))"
        ),
        accepts=">= 0",
        resumable=True,
    )
    max_model_len: int | None = key(
        None,
        help="context length; null = the checkpoint's `max_position_embeddings`",
        accepts=">= 1, or null",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = key(
        None,
        help=(
            "engine dtype; null = `trainer.dtype` (a generator composed alone: the checkpoint's dtype). "
            "Logprob parity with the trainer: < 1e-6 in fp32, ~3e-3 in bf16 "
            "([benchmarks.md](benchmarks.md#bf16-logprob-parity))"
        ),
    )
    seed: int = key(0, help="engine seed", accepts="in [0, 2^32 - 1]")
    swap_mode: SwapMode = key(
        "inflight",
        help=(
            "`inflight`: apply new weights between engine steps with requests running (they keep their "
            "KV); `drain`: finish running requests first; `abort_resume`: abort running requests and "
            "re-submit them with their generated prefix under the new weights "
            "([staleness.md](staleness.md#in-flight-weight-swaps))"
        ),
    )
    calls_at_once: int | None = key(
        None,
        help=(
            "generate calls the generator runs at once, their requests in one engine batch; 0: no limit; "
            "null: 0 for a multi-turn run (a call is a turn of a few episodes), 1 for a single-turn one "
            "(a call is a rollout's samples: the first call's reach the trainer first) "
            "([environments.md](environments.md#how-turns-reach-the-generator))"
        ),
        accepts=">= 0, or null",
    )
    cpu_threads_bind: str = key(
        "0",
        help=(
            'CPU engines: the cores the engine computes on. A list (`"0"`, `"0-3"`, `"0,2"`) gives the engine '
            'that many torch threads (vLLM\'s in-process engine applies no binding of its own); `"0"`: one, the '
            "other cores left to the trainer. `auto`, `nobind`: torch's default, a thread per core: on a tiny "
            "model each small op then waits for the others "
            "([benchmarks.md](benchmarks.md#long-tails-benchmarkspipelinelong_tailpy))"
        ),
        accepts='cores (`"0"`, `"0-3"`, `"0,2"`), `auto`, `nobind`',
    )
    gpu_memory_utilization: float = key(
        0.5,
        help=(
            "share of its GPU's memory vLLM may take: weights, activations, CUDA graphs and, unless "
            "`generator.kv_cache_gib` sizes it, the KV cache (what is left of the share). Two engines, or "
            "an engine and the trainer, on one GPU must fit together (`placement.share_gpus`). vLLM's CPU "
            "build reads it as a share of RAM when `kv_cache_gib` is null"
        ),
        accepts="in (0, 1]",
    )
    kv_cache_gib: float | None = key(
        0.0625,
        help=(
            "KV cache size; null = vLLM's default (on CPU it reserves several GiB per engine, seconds to "
            "allocate). 64 MiB holds 65,536 tokens of the tiny model (1 KiB each in float32); one of `2 x "
            "layers x kv_heads x head_dim x dtype bytes` per token for others. A cache too small for one "
            "sequence of `generator.max_model_len` is an error naming both keys"
        ),
        accepts="> 0, or null",
    )
    enforce_eager: bool | None = key(
        None,
        help=(
            "vLLM's `enforce_eager`: no CUDA graphs and no torch.compile (vLLM turns compile off under "
            "it). null = false on GPU; true on CPU, unless `generator.compile=true`"
        ),
        accepts="true, false, or null",
        resumable=True,
    )
    compile: bool | None = key(
        None,
        help=(
            "vLLM's torch.compile of the model (`compilation_config.mode`: `VLLM_COMPILE` when on, `NONE` "
            "when off). null = on on GPU (off if `enforce_eager=true`), off on CPU"
        ),
        accepts="true, false, or null; not true with `enforce_eager=true`",
        resumable=True,
    )
    cpu_weights: Literal["plain", "packed"] = key(
        "plain",
        help=(
            "CPU engines only (ignored on GPU). `plain`: the linear layers keep their weights as loaded "
            "(vLLM's torch-linear path) and a weight swap copies the new tensors in place with vLLM's "
            "`model.load_weights`; `packed`: vLLM's oneDNN-packed layout, rebuilt by its layer-wise "
            "`reload_weights` at every swap. A `plain` swap is several times cheaper; decode is as fast "
            "either way on small models and faster packed on larger ones: for a larger model on CPU with "
            "long completions, `packed` (swap and decode measured at three sizes: "
            "[benchmarks.md](benchmarks.md#generation-pause-per-weight-swap-benchmarkscomponentsswap_pausepy)). If "
            "vLLM's CPU kernels for the dtype pack the layers anyway, the generator logs a warning and "
            "reloads layer by layer"
        ),
    )

    def __post_init__(self) -> None:
        check_choices(self, "generator")
        check_range("generator.count", self.count, AT_LEAST_1)
        check_range("generator.max_restarts", self.max_restarts, AT_LEAST_0)
        check_range(
            "generator.max_model_len",
            self.max_model_len,
            AT_LEAST_1,
            nullable=True,
            note="null = the checkpoint's context length",
        )
        # vLLM seeds numpy with it, which takes 32-bit unsigned seeds only.
        check_range("generator.seed", self.seed, Range(0, 2**32 - 1))
        check_range("generator.calls_at_once", self.calls_at_once, AT_LEAST_0, nullable=True, note="0 = no limit")
        check_range("generator.gpu_memory_utilization", self.gpu_memory_utilization, FRACTION)
        check_range("generator.kv_cache_gib", self.kv_cache_gib, POSITIVE, nullable=True, note="null = vLLM's default")
        self.cpu_cores()  # a malformed list is refused here, naming the key
        if self.enforce_eager and self.compile:
            # vLLM's enforce_eager sets its compilation mode to none, whatever was asked.
            raise ConfigError(
                "generator.compile=true with generator.enforce_eager=true: eager mode turns vLLM's "
                "torch.compile off; set generator.enforce_eager=false (or null)"
            )

    def calls_at_once_for(self, multi_turn: bool) -> int:
        """calls_at_once, null resolved: 0 (no limit) where a call is a turn of a few episodes,
        1 where it is a rollout's samples (the first call's reach the trainer first)."""
        if self.calls_at_once is not None:
            return self.calls_at_once
        return 0 if multi_turn else 1

    def cpu_cores(self) -> list[int] | None:
        """The cores `cpu_threads_bind` lists (None: `auto` or `nobind`, torch's default threads)."""
        value = str(self.cpu_threads_bind)
        if value in ("auto", "nobind"):
            return None
        cores: list[int] = []
        for part in value.split(","):
            low, dash, high = part.strip().partition("-")
            high = high if dash else low
            if not low.isdigit() or not high.isdigit() or int(high) < int(low):
                raise ConfigError(
                    f'generator.cpu_threads_bind={value!r}: a list of cores ("0", "0-3", "0,2"), auto or nobind'
                )
            cores.extend(range(int(low), int(high) + 1))
        return sorted(set(cores))

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
    temperature: float = key(1.0, help="sampling temperature; 0 = greedy", accepts=">= 0")
    top_p: float = key(
        1.0,
        help="nucleus sampling: sample from the smallest set of tokens whose probability reaches it",
        accepts="in (0, 1]",
    )
    top_k: int = key(
        0,
        help="sample from the `top_k` most likely tokens only; 0 = every token",
        accepts=">= 0",
    )
    min_p: float = key(
        0.0,
        help="drop the tokens less likely than `min_p` times the most likely one; 0 = none",
        accepts="in [0, 1)",
    )
    keep_mask: bool | None = key(
        None,
        help=(
            "record the tokens the sampler kept at each step (top-k / top-p / min-p) and compute the "
            "trainer's log-probabilities over the same sets ([loss.md](loss.md#keep-sampling-mask-samplingkeep_mask)); "
            "null = on whenever sampling truncates"
        ),
        accepts="true, false or null",
    )
    kept_set_cap: int = key(
        1024,
        help=(
            "the largest kept set recorded (4 bytes an id); a token whose set is larger is trained over "
            "the whole vocabulary, its behaviour logprob made whole-vocabulary too, and counted "
            "(`sampling/kept_over_cap_frac`, a console note); must be >= `top_k`"
        ),
        accepts=">= 1",
    )
    max_tokens: int = key(
        3,
        help="completion length limit (default: answer digit + EOS + one spare)",
        accepts=">= 1, leaving room for the prompt in the context",
    )
    min_tokens: int = key(
        0,
        help=("EOS is not sampled before this many tokens (vLLM's `min_tokens`); `configs/grpo_long.yaml` sets 256"),
        accepts="in [0, `max_tokens`]",
    )

    def __post_init__(self) -> None:
        check_range("sampling.temperature", self.temperature, AT_LEAST_0, note="0 = greedy")
        check_range("sampling.top_p", self.top_p, FRACTION)
        check_range("sampling.top_k", self.top_k, AT_LEAST_0, note="0 = every token")
        check_range("sampling.min_p", self.min_p, Range(0, 1, high_open=True), note="0 = none")
        check_range("sampling.kept_set_cap", self.kept_set_cap, AT_LEAST_1)
        if self.keep_mask and not self.truncates:
            raise ConfigError(
                "sampling.keep_mask=true: sampling keeps every token (top_p=1, top_k=0, min_p=0), so there is "
                "no set to record; truncate with sampling.top_p, top_k or min_p, or leave keep_mask null"
            )
        if self.masks and self.top_k > self.kept_set_cap:
            raise ConfigError(
                f"sampling.top_k={self.top_k} keeps more tokens than sampling.kept_set_cap={self.kept_set_cap} "
                "records: no kept set would be recorded and the mask would be off for every token; raise "
                f"sampling.kept_set_cap to at least {self.top_k}, or set sampling.keep_mask=false"
            )
        check_range("sampling.max_tokens", self.max_tokens, AT_LEAST_1)
        check_range("sampling.min_tokens", self.min_tokens, Range(0, self.max_tokens), note="<= sampling.max_tokens")

    @property
    def truncates(self) -> bool:
        """Whether the sampler drops tokens before sampling (top-p, top-k or min-p)."""
        return self.top_p < 1 or self.top_k > 0 or self.min_p > 0

    @property
    def masks(self) -> bool:
        """Whether generators record the kept sets and the trainer trains over them."""
        return self.truncates if self.keep_mask is None else self.keep_mask

    @property
    def logit_temperature(self) -> float:
        """What the trainer divides the logits by to get the sampled distribution: the temperature,
        or 1 for greedy sampling (whose logprobs vLLM reports untempered)."""
        return self.temperature if self.temperature > 0 else 1.0
