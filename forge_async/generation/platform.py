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
"""

import os
from dataclasses import dataclass

from forge_async.generation.config import GeneratorConfig
from forge_async.errors import ConfigError


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
        """Environment the engine's process needs before vLLM is imported."""
        return {} if self.on_gpu or self.compile else {"TORCHDYNAMO_DISABLE": "1"}


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
