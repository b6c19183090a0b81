"""The experts a real vLLM engine routes each token of an MoE model to, recorded on the completion:
against the routes TorchTitan's model takes for the same tokens, through parallel samples, prefix
cache hits and an abort-and-resume weight swap."""

import os

import pytest

from forge_async.errors import ConfigError
from forge_async.generation.route_capture import route_capture
from forge_async.generation.versioned_engine import VersionedEngine
from tests.support.moe_routes import (
    assert_routes_after_an_abort_resume_swap_are_the_new_weights,
    assert_routes_of_parallel_samples_and_of_a_cached_prefix,
    moe_engine,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def cached_engine(tiny_moe_checkpoint) -> VersionedEngine:
    """Prefix caching on, as drain and abort_resume run it."""
    return moe_engine(tiny_moe_checkpoint, "abort_resume")


@pytest.mark.procs
def test_routes_of_parallel_samples_and_of_a_prefix_served_from_the_cache(cached_engine, tiny_moe_checkpoint):
    assert_routes_of_parallel_samples_and_of_a_cached_prefix(cached_engine, tiny_moe_checkpoint)


@pytest.mark.procs
def test_routes_after_an_abort_resume_swap_are_the_new_weights_routes(cached_engine, tiny_moe_checkpoint):
    assert_routes_after_an_abort_resume_swap_are_the_new_weights(cached_engine, tiny_moe_checkpoint)


def test_a_gpu_engine_refuses_inflight_swaps_for_vllms_route_export(tiny_moe_checkpoint, monkeypatch):
    """vLLM exports routes only with prefix caching on, which swap_mode=inflight turns off."""
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    shape = tiny_moe_checkpoint.shape
    with pytest.raises(ConfigError, match="generator.swap_mode=inflight: .* use drain or abort_resume"):
        route_capture(shape.moe, shape.n_layers, on_gpu=True, swap_mode="inflight")
    export = route_capture(shape.moe, shape.n_layers, on_gpu=True, swap_mode="drain")
    assert export.llm_kwargs() == {"enable_return_routed_experts": True}
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
