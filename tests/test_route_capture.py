"""The experts a real vLLM engine routes each token of an MoE model to, recorded on the completion:
against the routes TorchTitan's model takes for the same tokens, through parallel samples, prefix
cache hits and an abort-and-resume weight swap."""

import os

import numpy as np
import pytest
import torch

from forge_async.errors import ConfigError
from forge_async.generation.route_capture import route_capture
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.shape import UNKNOWN_ROUTE
from forge_async.models.titan import build_titan_model, state_dict_adapter
from tests.support.moe_routes import experts_taken
from tests.support.vllm_engine import params, perturbed, run_to_end, start_llm

pytestmark = pytest.mark.unit

BLOCK = 32  # KV block size (vLLM's CPU attention: a multiple of 32): the prompt fills one block,
PROMPT = [11] + [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3] * 2 + [13]  # the cache can serve


def moe_engine(checkpoint, swap_mode: str) -> VersionedEngine:
    shape = checkpoint.shape
    routes = route_capture(shape.moe, shape.n_layers, on_gpu=False, swap_mode=swap_mode)
    llm = start_llm(checkpoint, swap_mode, block_size=BLOCK, **routes.llm_kwargs())
    return VersionedEngine(llm, swap_mode, routes=routes)


def titan_routes(checkpoint, hf_state_dict, sequence: list[int]) -> np.ndarray:
    """[len(sequence), layers, K] sorted expert ids TorchTitan's model routes `sequence` to."""
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(hf_state_dict))
    taken = experts_taken(model)
    with torch.no_grad():
        model(torch.tensor([sequence]))
    return torch.stack(taken, dim=2)[0].numpy()  # experts_taken: [B, L, K] per layer


def assert_routes_of(completion, checkpoint, hf_state_dict) -> None:
    fed = completion.prompt_ids + completion.token_ids[:-1]
    assert completion.routes is not None and completion.routes.dtype == np.uint8
    assert completion.routes.shape == (len(fed), checkpoint.shape.n_layers, checkpoint.shape.moe.top_k)
    assert not (completion.routes == UNKNOWN_ROUTE).any()
    np.testing.assert_array_equal(np.sort(completion.routes, axis=-1), titan_routes(checkpoint, hf_state_dict, fed))


@pytest.fixture(scope="module")
def cached_engine(tiny_moe_checkpoint) -> VersionedEngine:
    """Prefix caching on, as drain and abort_resume run it."""
    return moe_engine(tiny_moe_checkpoint, "abort_resume")


@pytest.mark.procs
def test_routes_of_parallel_samples_and_of_a_prefix_served_from_the_cache(cached_engine, tiny_moe_checkpoint):
    hf_state_dict = tiny_moe_checkpoint.load_hf_state_dict()
    sampled = params(temperature=1.0, seed=3)
    group = [cached_engine.submit(PROMPT, sampled) for _ in range(3)]  # one vLLM request, n=3
    run_to_end(cached_engine)
    cached_tokens = []
    record = cached_engine._record
    cached_engine._record = lambda output: (cached_tokens.append(output.num_cached_tokens), record(output))
    again = cached_engine.submit(PROMPT + [4, 4], params())
    run_to_end(cached_engine)
    cached_engine._record = record

    assert max(cached_tokens) >= BLOCK, "the second request's prompt was not served from the prefix cache"
    assert len({tuple(r.result.token_ids) for r in group}) > 1, "the samples are alike: nothing tells them apart"
    for request in group + [again]:
        assert_routes_of(request.result, tiny_moe_checkpoint, hf_state_dict)


@pytest.mark.procs
def test_routes_after_an_abort_resume_swap_are_the_new_weights_routes(cached_engine, tiny_moe_checkpoint):
    old = tiny_moe_checkpoint.load_hf_state_dict()
    new = perturbed(old, seed=1)
    request = cached_engine.submit(PROMPT, params())
    for _ in range(4):
        cached_engine.step()
    assert request.token_ids and request.result is None
    cached_engine.swap(new, version=1)
    run_to_end(cached_engine)
    fed = PROMPT + request.result.token_ids[:-1]
    assert (titan_routes(tiny_moe_checkpoint, old, fed) != titan_routes(tiny_moe_checkpoint, new, fed)).any()
    assert_routes_of(request.result, tiny_moe_checkpoint, new)
    cached_engine.swap(old, version=2)


def test_a_gpu_engine_refuses_inflight_swaps_for_vllms_route_export(tiny_moe_checkpoint, monkeypatch):
    """vLLM exports routes only with prefix caching on, which swap_mode=inflight turns off."""
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    shape = tiny_moe_checkpoint.shape
    with pytest.raises(ConfigError, match="generator.swap_mode=inflight: .* use drain or abort_resume"):
        route_capture(shape.moe, shape.n_layers, on_gpu=True, swap_mode="inflight")
    export = route_capture(shape.moe, shape.n_layers, on_gpu=True, swap_mode="drain")
    assert export.llm_kwargs() == {"enable_return_routed_experts": True}
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
