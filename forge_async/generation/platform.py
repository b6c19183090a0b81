"""How a generator's vLLM engine runs where it lands: compiled or not, CUDA graphs or eager.

`resolve_platform` decides from the config and from whether the proc sees a GPU; it is
pure, so every decision can be tested on a CPU box. `prepare_process` applies it in the
generator's proc before vLLM is imported. Light: imports neither torch nor vLLM at module
level (the proc bootstrap unpickles it first).

The defaults, per platform:

- GPU: `compile` on (vLLM's own torch.compile of the model, compilation mode VLLM_COMPILE)
  and `enforce_eager` off, so vLLM captures CUDA graphs. With `compile=false` the model runs
  uncompiled (mode NONE) and vLLM still captures full CUDA graphs unless `enforce_eager`.
- CPU: `compile` off and `enforce_eager` on: there are no graphs to capture on CPU, and
  compiling (vLLM's CPU build turns VLLM_COMPILE into one Dynamo trace through Inductor's
  C++ backend; it works) makes the engine's start many times longer, a cost a tiny model
  never wins back, and decodes no faster after (docs/configuration.md). TORCHDYNAMO_DISABLE=1
  is then set in the proc, before vLLM builds its sampler: it wraps its logprobs op in
  torch.compile, which would otherwise compile on the first logprobs request and hold it up.
  `cpu_weights` (plain by default) says whether the linear layers keep their weights unpacked
  (generation/engine_weights.py). `cpu_threads_bind` sets the engine's torch threads: vLLM
  applies it only in its multiprocess executor, not in the generator's in-process engine.

Either way the engine runs vLLM's V1 model runner (`VLLM_USE_V2_MODEL_RUNNER=0`), except for an MoE
model on a GPU, which needs V2 (`model_runner` says which, and why, at the generator's start).
"""

import os
from dataclasses import dataclass

from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.errors import ConfigError

# vLLM reads it when it builds an engine (vllm/config/vllm.py, VllmConfig.use_v2_model_runner):
# "0" the V1 model runner, "1" V2; unset, V2 wherever Triton imports (any CUDA GPU), else V1.
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


@dataclass(frozen=True)
class EnginePlatform:
    on_gpu: bool
    enforce_eager: bool  # no CUDA graphs and no compile (vLLM turns compile off under it)
    compile: bool
    plain_weights: bool = False  # CPU: linear weights kept unpacked, swaps copy them in place
    cpu_threads: int | None = None  # CPU: the engine's torch threads (None: torch's default, one per core)

    def llm_kwargs(self) -> dict:
        """vLLM's knobs for these decisions (LLM(...) keyword arguments), and no asynchronous
        scheduling: with it (vLLM's default on a GPU; never on CPU) a step is launched before the
        last one's outputs are read, so tokens sampled before a weight swap would come back after
        it, tagged with the new version, and a step's kept sets (kept_set_capture.py) would be
        read with the step before's outputs."""
        mode = "VLLM_COMPILE" if self.compile else "NONE"
        return {"enforce_eager": self.enforce_eager, "compilation_config": {"mode": mode}, "async_scheduling": False}

    def env(self) -> dict[str, str]:
        """Environment the engine's process needs before vLLM is imported: the V1 model runner
        (`model_runner`: the generator's setup switches an MoE model's GPU engine to V2) and, for
        an uncompiled CPU engine, no Dynamo."""
        no_dynamo = {} if self.on_gpu or self.compile else {"TORCHDYNAMO_DISABLE": "1"}
        return {RUNNER_ENV: "0", **no_dynamo}


@dataclass(frozen=True)
class ModelRunner:
    """Which of vLLM's model runners a generator's engine runs, and why."""

    v2: bool
    why: str

    def env(self) -> dict[str, str]:
        return {RUNNER_ENV: "1" if self.v2 else "0"}

    def line(self) -> str:
        """The start-up line that says it."""
        return f"vLLM's {'V2' if self.v2 else 'V1'} model runner ({RUNNER_ENV}={self.env()[RUNNER_ENV]}): {self.why}"


def model_runner(on_gpu: bool, moe: bool, sampling: SamplingConfig, reads_sampler: bool) -> ModelRunner:
    """The model runner of a generator's engine. `reads_sampler`: the engine reports the logprobs
    of the distribution it sampled from, read at its sampler's top-k/top-p stage
    (generation/kept_set_capture.py).

    V1 wherever it can be: only V1's sampler has that stage (vllm/v1/sample/sampler.py's
    `topk_topp_sampler`; V2's, vllm/v1/worker/gpu/sample/sampler.py, samples in its own kernels),
    and vLLM's CPU engine runs it (its CPUModelRunner extends V1's GPUModelRunner; the CPU build
    has a V2 runner too, taken where Triton has a CPU backend), so a dense model's GPU engine runs
    the code the CPU tests run. Left to itself vLLM would pick V2 on any GPU where Triton imports.
    V2 for an MoE model on a GPU: vLLM's routed-experts export, which the generator reads there
    (generation/route_capture.py), runs on V2 only (vllm/config/vllm.py,
    `_verify_aux_output_compatibility`). Such an engine cannot also read the sampler's stage:
    refused, naming the sampling keys that need it."""
    if not on_gpu:
        return ModelRunner(False, "a CPU engine, whose sampler and batch the generator reads")
    if not moe:
        return ModelRunner(
            False,
            "its sampler has the top-k/top-p stage that the sampled distribution is read from "
            "(V2, vLLM's default on a GPU, has none), and it is the runner the CPU tests exercise",
        )
    if reads_sampler:
        raise ConfigError(
            f"{_sampler_keys(sampling)}: the generator then reads the distribution each token was sampled from "
            "at the top-k/top-p stage of vLLM's V1 sampler, but an MoE model on a GPU generator runs vLLM's V2 "
            "model runner, which has no such stage, for its routed-experts export (the routes the trainer "
            "replays and compares); sample this model with sampling.temperature=1, top_p=1, top_k=0, min_p=0 "
            "and min_tokens=0, or run its generator on CPU"
        )
    return ModelRunner(True, "an MoE model: vLLM's routed-experts export runs on V2 only")


@dataclass(frozen=True)
class EngineStarted:
    """A generator's answer to `setup`: its engine's start-up in seconds, and the line that says
    which model runner it runs (`ModelRunner.line`), for the controller's console."""

    seconds: float
    runner: str


def _sampler_keys(sampling: SamplingConfig) -> str:
    """The sampling keys that make the engine report the distribution it sampled from."""
    keys = [
        f"sampling.{name}={value}"
        for name, value, default in (
            ("temperature", sampling.temperature, 1.0),
            ("top_p", sampling.top_p, 1.0),
            ("top_k", sampling.top_k, 0),
            ("min_p", sampling.min_p, 0.0),
            ("min_tokens", sampling.min_tokens, 0),
        )
        if value != default and not (name == "temperature" and sampling.logit_temperature == 1)
    ]
    return ", ".join(keys) or "the run's sampling"


def resolve_platform(config: GeneratorConfig, on_gpu: bool) -> EnginePlatform:
    """The effective settings: the config's, or the platform's default where it says null.

    `compile` defaults to on on a GPU unless the user asked for eager mode; `enforce_eager`
    defaults to true on CPU unless the user asked to compile."""
    compiled = config.compile if config.compile is not None else on_gpu and not config.enforce_eager
    eager = config.enforce_eager if config.enforce_eager is not None else not on_gpu and not compiled
    plain = not on_gpu and config.cpu_weights == "plain"
    cores = None if on_gpu else config.cpu_cores()
    threads = len(cores) if cores else None
    return EnginePlatform(
        on_gpu=on_gpu, enforce_eager=eager, compile=compiled, plain_weights=plain, cpu_threads=threads
    )


def prepare_process(config: GeneratorConfig) -> EnginePlatform:
    """Decide in this process (does it see a GPU?) and set the environment that follows.

    Run by the generator proc's bootstrap before vLLM is imported, and again by the
    generator's setup (a no-op then; it covers procs spawned without that bootstrap)."""
    import torch

    platform = resolve_platform(config, on_gpu=torch.cuda.is_available())
    if platform.compile and os.environ.get("TORCHDYNAMO_DISABLE") == "1":
        raise ConfigError(
            "generator.compile is on but TORCHDYNAMO_DISABLE=1 is set in the environment, which "
            "would silently turn vLLM's torch.compile off: unset it, or set generator.compile=false"
        )
    os.environ.update(platform.env())
    if platform.cpu_threads:
        # vLLM binds a CPU engine's threads only in its multiprocess executor; in process (ours)
        # the engine runs on torch's default of a thread per core, and each of the tiny model's
        # small ops then waits for the other threads (~20x its single-thread time on 2 cores).
        # Per thread under OpenMP: set again by the generator's setup, on the thread that steps;
        # torch's own function, which vLLM's CPU worker replaces with a no-op once it starts.
        torch._C.set_num_threads(platform.cpu_threads)
    return platform
