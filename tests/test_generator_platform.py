"""How the generator's vLLM engine runs on CPU and on GPU, decided without either (pure functions)."""

import os
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.generation.platform import (
    RUNNER_ENV,
    EnginePlatform,
    ModelRunner,
    model_runner,
    prepare_process,
    resolve_platform,
)
from forge_async.errors import ConfigError

pytestmark = pytest.mark.unit

EAGER = EnginePlatform(on_gpu=False, enforce_eager=True, compile=False, plain_weights=True, cpu_threads=1)


@pytest.mark.parametrize(
    "enforce_eager, compile, on_gpu, expected",
    [
        # Defaults: eager, uncompiled on CPU; CUDA graphs and compile on GPU.
        (None, None, False, EAGER),
        (None, None, True, EnginePlatform(True, enforce_eager=False, compile=True)),
        # Asking for eager on GPU turns the default compile off (vLLM would anyway).
        (True, None, True, EnginePlatform(True, enforce_eager=True, compile=False)),
        # No compile on GPU keeps CUDA graphs: eager stays off.
        (None, False, True, EnginePlatform(True, enforce_eager=False, compile=False)),
        # Compile on CPU: eager's default follows (vLLM's enforce_eager would undo compile).
        (
            None,
            True,
            False,
            EnginePlatform(False, enforce_eager=False, compile=True, plain_weights=True, cpu_threads=1),
        ),
        (
            False,
            None,
            False,
            EnginePlatform(False, enforce_eager=False, compile=False, plain_weights=True, cpu_threads=1),
        ),
    ],
)
def test_null_means_the_platform_default_and_explicit_values_win(enforce_eager, compile, on_gpu, expected):
    config = GeneratorConfig(enforce_eager=enforce_eager, compile=compile)
    assert resolve_platform(config, on_gpu) == expected


@pytest.mark.parametrize(
    "cpu_weights, on_gpu, plain",
    [("plain", False, True), ("packed", False, False), ("plain", True, False), ("packed", True, False)],
)
def test_plain_weights_only_on_cpu_and_only_when_asked(cpu_weights, on_gpu, plain):
    assert resolve_platform(GeneratorConfig(cpu_weights=cpu_weights), on_gpu).plain_weights is plain


def test_compile_maps_to_vllm_compilation_mode_and_eager_to_enforce_eager_and_steps_are_never_scheduled_ahead():
    never_ahead = {"async_scheduling": False}  # a step's tokens come back before the next is launched
    assert EAGER.llm_kwargs() == {"enforce_eager": True, "compilation_config": {"mode": "NONE"}} | never_ahead
    gpu = EnginePlatform(on_gpu=True, enforce_eager=False, compile=True)
    assert gpu.llm_kwargs() == {"enforce_eager": False, "compilation_config": {"mode": "VLLM_COMPILE"}} | never_ahead


def test_dynamo_is_disabled_only_for_an_uncompiled_cpu_engine_and_every_engine_runs_vllms_v1_runner():
    v1 = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert EAGER.env() == v1 | {"TORCHDYNAMO_DISABLE": "1"}
    assert EnginePlatform(on_gpu=False, enforce_eager=False, compile=True).env() == v1
    assert EnginePlatform(on_gpu=True, enforce_eager=True, compile=False).env() == v1
    assert EnginePlatform(on_gpu=True, enforce_eager=False, compile=True).env() == v1


def test_eager_with_compile_is_refused_naming_both_keys():
    with pytest.raises(ConfigError, match="generator.compile=true with generator.enforce_eager=true"):
        GeneratorConfig(enforce_eager=True, compile=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU decisions")
def test_prepare_process_sets_the_environment_in_this_process_only_where_needed(monkeypatch):
    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    monkeypatch.setenv(RUNNER_ENV, "1")  # whatever the process had, the engine runs V1
    assert prepare_process(GeneratorConfig(compile=True)).compile
    assert "TORCHDYNAMO_DISABLE" not in os.environ
    assert os.environ[RUNNER_ENV] == "0"
    assert prepare_process(GeneratorConfig()) == EAGER
    assert os.environ["TORCHDYNAMO_DISABLE"] == "1"


def test_compile_with_dynamo_disabled_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    with pytest.raises(ConfigError, match="TORCHDYNAMO_DISABLE=1"):
        prepare_process(GeneratorConfig(compile=True))


TRUNCATED = SamplingConfig(temperature=0.7, top_p=0.9, min_tokens=2)


@pytest.mark.parametrize(
    "on_gpu, moe, sampling, reads_sampler, v2",
    [
        (False, False, TRUNCATED, True, False),
        (False, True, TRUNCATED, True, False),  # CPU routes are read beside V1's KV cache
        (True, False, SamplingConfig(), False, False),
        (True, False, TRUNCATED, True, False),  # the kept sets: V1's top-k/top-p stage
        (True, True, SamplingConfig(), False, True),  # vLLM's routed-experts export: V2 only
        (True, True, SamplingConfig(temperature=0.0), False, True),
    ],
)
def test_the_engine_runs_vllms_v1_runner_except_an_moe_model_on_a_gpu(on_gpu, moe, sampling, reads_sampler, v2):
    runner = model_runner(on_gpu, moe, sampling, reads_sampler)
    assert runner.v2 is v2
    assert runner.env() == {RUNNER_ENV: "1" if v2 else "0"}
    assert runner.line().startswith(f"vLLM's {'V2' if v2 else 'V1'} model runner (VLLM_USE_V2_MODEL_RUNNER=")
    assert runner.why in runner.line()


def test_an_moe_model_on_a_gpu_cannot_report_the_sampled_distribution_naming_the_keys():
    with pytest.raises(ConfigError) as refused:
        model_runner(on_gpu=True, moe=True, sampling=TRUNCATED, reads_sampler=True)
    message = str(refused.value)
    assert message.startswith("sampling.temperature=0.7, sampling.top_p=0.9, sampling.min_tokens=2: ")
    assert "V2 model runner" in message and "routed-experts export" in message
    assert "top_k" in message and "or run its generator on CPU" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="stands in for a GPU on a CPU box")
@pytest.mark.parametrize(
    "setting, v2",
    [
        (None, True),  # vLLM's own choice where Triton imports (any CUDA GPU)
        (EnginePlatform(on_gpu=True, enforce_eager=False, compile=True).env()[RUNNER_ENV], False),
        (ModelRunner(True, "an MoE model").env()[RUNNER_ENV], True),
    ],
)
def test_vllm_takes_v2_on_a_gpu_unless_the_generator_sets_v1(tiny_checkpoint, monkeypatch, setting, v2):
    """The installed vLLM's own decision (vllm/config/vllm.py, use_v2_model_runner), with Triton
    made to import as on a GPU and the environment read as vLLM reads it, afresh (vllm/envs.py)."""
    import vllm.config.vllm as vllm_config
    import vllm.envs
    from vllm.engine.arg_utils import EngineArgs

    with mock.patch.dict(os.environ):  # vLLM's CPU platform sets variables of its own
        config = EngineArgs(
            model=str(tiny_checkpoint.path), max_model_len=64, **EAGER.llm_kwargs()
        ).create_engine_config()
    if setting is None:
        monkeypatch.delenv(RUNNER_ENV, raising=False)
    else:
        monkeypatch.setenv(RUNNER_ENV, setting)
    read = vllm.envs.environment_variables[RUNNER_ENV]()
    monkeypatch.setattr(vllm_config, "envs", SimpleNamespace(VLLM_USE_V2_MODEL_RUNNER=read))
    monkeypatch.setattr(vllm_config, "HAS_TRITON", True)
    assert config.use_v2_model_runner is v2


def test_the_controller_no_longer_disables_dynamo_for_every_proc(monkeypatch):
    from forge_async.process import runtime

    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    runtime.apply_defaults()
    assert "TORCHDYNAMO_DISABLE" not in os.environ


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks how vLLM's CPU build reads the knobs")
@pytest.mark.parametrize(
    "platform, mode",
    [(EAGER, "NONE"), (EnginePlatform(on_gpu=False, enforce_eager=False, compile=True), "DYNAMO_TRACE_ONCE")],
)
def test_vllm_reads_the_knobs_as_meant(tiny_checkpoint, platform, mode):
    """The installed vLLM's own config resolution (no engine is started). Its CPU build runs
    VLLM_COMPILE as one Dynamo trace through Inductor, and has no CUDA graphs."""
    with mock.patch.dict(os.environ):  # vLLM's CPU platform sets variables of its own
        from vllm.config import CUDAGraphMode
        from vllm.engine.arg_utils import EngineArgs

        args = EngineArgs(model=str(tiny_checkpoint.path), max_model_len=64, **platform.llm_kwargs())
        vllm_config = args.create_engine_config()
    assert vllm_config.compilation_config.mode.name == mode
    assert vllm_config.compilation_config.cudagraph_mode == CUDAGraphMode.NONE
    assert vllm_config.model_config.enforce_eager == platform.enforce_eager
    assert vllm_config.scheduler_config.async_scheduling is False


def test_the_environment_without_defaults_drops_only_what_forge_async_added(monkeypatch):
    """A baseline launched by a benchmark sees the user's environment: forge_async's defaults
    (e.g. OMP_WAIT_POLICY) are left out, a value the user set is kept."""
    from forge_async.process import runtime

    monkeypatch.setattr(runtime, "_applied", set())
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    runtime.apply_defaults()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    env = runtime.environment_without_defaults()
    assert "OMP_WAIT_POLICY" not in env
    assert env["TOKENIZERS_PARALLELISM"] == "true"
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize(
    "bind, cores",
    [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0,2", [0, 2]), ("1, 3-4", [1, 3, 4]), ("auto", None), ("nobind", None)],
)
def test_cpu_threads_bind_lists_cores_or_leaves_torch_its_default(bind, cores):
    assert GeneratorConfig(cpu_threads_bind=bind).cpu_cores() == cores


@pytest.mark.parametrize("bind", ["", "zero", "3-1", "0-", "-1", "0;1"])
def test_a_malformed_core_list_is_refused_naming_the_key(bind):
    with pytest.raises(ConfigError, match=r"generator.cpu_threads_bind=.*a list of cores"):
        GeneratorConfig(cpu_threads_bind=bind)


def test_the_engine_gets_a_torch_thread_per_listed_core_on_cpu_only():
    assert resolve_platform(GeneratorConfig(cpu_threads_bind="0-2"), on_gpu=False).cpu_threads == 3
    assert resolve_platform(GeneratorConfig(cpu_threads_bind="nobind"), on_gpu=False).cpu_threads is None
    assert resolve_platform(GeneratorConfig(cpu_threads_bind="0-2"), on_gpu=True).cpu_threads is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU decisions")
def test_prepare_process_sets_this_threads_torch_threads_from_the_core_list():
    before = torch.get_num_threads()
    try:
        prepare_process(GeneratorConfig(cpu_threads_bind="0"))
        assert torch.get_num_threads() == 1
        prepare_process(GeneratorConfig(cpu_threads_bind="0,1"))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
