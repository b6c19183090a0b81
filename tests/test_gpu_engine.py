"""The generator's vLLM engine on a CUDA GPU: the model runner and scheduling it gets, a weight swap
against TorchTitan and against a fresh engine, a swap mid-decode, abort and resume, kept sets read
from its runner's sampler, a LoRA swap while requests run and an MoE model's routes. Skipped
without a CUDA GPU and vLLM's CUDA build.

The checks are the CPU engine's (tests/support/engine_checks.py, kept_sets.py, moe_routes.py,
parity.py); what differs on a GPU is what the engine is: vLLM's V1 runner with torch.compile and
CUDA graphs for a dense model, its V2 runner for an MoE model (generation/platform.py)."""

import asyncio
import importlib.util

import pytest
import torch

from forge_async.actors.generator import sampling_params
from forge_async.generation.config import SamplingConfig
from forge_async.generation.kept_set_capture import KeptSetCapture
from forge_async.generation.route_capture import VllmRouteExport, in_process_runner
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.titan import load_frozen_model
from forge_async.weights import store
from tests.support.digits import fixed_sequences
from tests.support.engine_checks import (
    PROMPT,
    assert_a_swap_gives_the_new_weights_logprobs,
    assert_a_swap_mid_decode_tags_each_token,
    assert_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights,
    assert_an_adapter_swap_moves_running_requests,
)
from tests.support.kept_sets import expected_sets, recorded_sets
from tests.support.meshes import spawn_generator, spawn_trainer
from tests.support.moe_routes import (
    assert_routes_after_an_abort_resume_swap_are_the_new_weights,
    assert_routes_of_parallel_samples_and_of_a_cached_prefix,
    moe_engine,
)
from tests.support.parity import assert_parity_across_one_step, max_diff
from tests.support.vllm_engine import perturbed, run_to_end, start_llm

ON_CUDA = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None

pytestmark = [
    pytest.mark.procs,
    pytest.mark.skipif(not ON_CUDA, reason="the GPU engine's checks need a CUDA GPU and vLLM's CUDA build"),
]

TRUNCATED = SamplingConfig(temperature=0.8, top_k=8, top_p=0.9, min_p=0.1, max_tokens=12)


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    """A dense model's engine as a generator builds it on a GPU, with prefix caching (drain and
    abort_resume) in 32-token blocks, so that a resumed prompt + prefix fill a block."""
    return start_llm(tiny_checkpoint, "abort_resume", block_size=32)


@pytest.fixture(scope="module")
def kept_llm(tiny_checkpoint):
    """An engine that reports the distribution it sampled from, as a truncating run's generator."""
    return start_llm(tiny_checkpoint, "abort_resume", block_size=32, **KeptSetCapture.llm_kwargs())


@pytest.fixture(scope="module")
def routed_engine(tiny_moe_checkpoint) -> VersionedEngine:
    return moe_engine(tiny_moe_checkpoint, "abort_resume")


def test_a_dense_engine_runs_vllms_v1_runner_compiled_with_cuda_graphs_and_no_step_ahead(llm):
    from vllm.config import CompilationMode, CUDAGraphMode

    config = llm.llm_engine.vllm_config
    runner = in_process_runner(llm, "the runner's checks")
    assert config.use_v2_model_runner is False
    assert type(runner).__module__ == "vllm.v1.worker.gpu_model_runner"
    assert runner.sampler.topk_topp_sampler is not None  # the stage the kept sets are read from
    assert config.scheduler_config.async_scheduling is False  # a step's tokens come back before the next
    assert config.compilation_config.mode == CompilationMode.VLLM_COMPILE
    assert config.compilation_config.cudagraph_mode != CUDAGraphMode.NONE
    assert config.model_config.enforce_eager is False
    assert config.cache_config.enable_prefix_caching


def test_an_moe_engine_runs_vllms_v2_runner_for_its_route_export(routed_engine):
    config = routed_engine.llm.llm_engine.vllm_config
    assert isinstance(routed_engine.routes, VllmRouteExport)
    assert config.use_v2_model_runner is True
    assert (
        type(in_process_runner(routed_engine.llm, "the runner's checks")).__module__
        == "vllm.v1.worker.gpu.model_runner"
    )
    assert config.scheduler_config.async_scheduling is False
    assert config.cache_config.enable_prefix_caching


def test_a_swap_gives_the_new_weights_logprobs_as_torchtitan_computes_them(llm, tiny_checkpoint):
    """vLLM's layer-wise reload into the weights CUDA graphs were captured with."""
    engine = VersionedEngine(llm, "inflight")
    assert not engine.loads_in_place
    assert_a_swap_gives_the_new_weights_logprobs(
        engine, tiny_checkpoint, perturbed(tiny_checkpoint.load_hf_state_dict(), seed=1)
    )


def test_a_swapped_generator_agrees_with_the_trainer_and_with_a_fresh_generator(
    tiny_checkpoint, weight_store, tmp_path
):
    """Generator and trainer procs on the GPU: parity at v0 and, after a step and a swap, at v1;
    then a generator started on the saved v1 scores as the swapped one does."""
    generator_procs, generator = spawn_generator(tiny_checkpoint)
    trainer_procs, trainer = spawn_trainer(tiny_checkpoint, procs=1)
    procs = [generator_procs, trainer_procs]
    try:
        assert any(line.startswith("vLLM's V1 model runner") for line in meshes._RUNNERS_SAID)
        assert_parity_across_one_step(generator, trainer)
        sequences = fixed_sequences()
        swapped = generator.score.call_one(sequences).get()
        saved = next(value for _, value in trainer.save_hf.call(str(tmp_path / "v1")).get().items())
        fresh_procs, fresh = spawn_generator(Checkpoint.open(saved.path))
        procs.append(fresh_procs)
        assert max_diff(swapped, fresh.score.call_one(sequences).get()) < 1e-5
    finally:
        asyncio.run(meshes.stop_all(*procs))
        asyncio.run(store.delete_versions_before(10**9))  # the store is the session's


@pytest.mark.parametrize("grouped", [False, True], ids=["3 requests", "1 request of 3 samples"])
def test_a_swap_mid_decode_tags_each_token_with_its_version(llm, tiny_checkpoint, grouped):
    assert_a_swap_mid_decode_tags_each_token(llm, tiny_checkpoint, grouped)


def test_abort_and_resume_computes_the_rest_with_the_new_weights(llm, tiny_checkpoint):
    assert_abort_resume_keeps_the_prefix_and_computes_the_rest_with_the_new_weights(llm, tiny_checkpoint)


def test_kept_sets_read_from_the_engines_sampler_are_what_vllm_keeps(kept_llm, tiny_checkpoint):
    engine = VersionedEngine(kept_llm, "abort_resume", kept_sets=KeptSetCapture(1024))
    requests = [engine.submit(PROMPT, sampling_params(TRUNCATED)) for _ in range(4)]
    run_to_end(engine)
    model = load_frozen_model(tiny_checkpoint)
    for request in requests:
        c = request.result
        assert recorded_sets(c) == expected_sets(model, c, TRUNCATED)
        assert all(token in kept for token, kept in zip(c.token_ids, recorded_sets(c)))


@pytest.mark.parametrize("mode", ["inflight", "abort_resume"])
def test_a_lora_swap_moves_running_requests_to_the_new_adapter(lora_llm, adapter_slot, tiny_checkpoint, mode):
    assert_an_adapter_swap_moves_running_requests(lora_llm, adapter_slot, tiny_checkpoint, mode)


def test_moe_routes_of_parallel_samples_a_cached_prefix_and_an_abort_resume_swap(routed_engine, tiny_moe_checkpoint):
    assert_routes_of_parallel_samples_and_of_a_cached_prefix(routed_engine, tiny_moe_checkpoint)
    assert_routes_after_an_abort_resume_swap_are_the_new_weights(routed_engine, tiny_moe_checkpoint)
