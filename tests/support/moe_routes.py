"""The expert ids an MoE model's layers received in a forward, and the routes a real vLLM engine
records for an MoE model's completions, checked against them."""

import numpy as np
import torch

from forge_async.generation.config import SamplingConfig
from forge_async.generation.platform import model_runner
from forge_async.generation.route_capture import route_capture
from forge_async.generation.versioned_engine import VersionedEngine
from forge_async.models.routes import moe_layers
from forge_async.models.shape import UNKNOWN_ROUTE
from forge_async.models.titan import build_titan_model, state_dict_adapter
from tests.support.vllm_engine import ON_GPU, params, perturbed, run_to_end, start_llm


def experts_taken(model) -> list[torch.Tensor]:
    """A forward's expert ids per MoE layer ([B, L, K], sorted), as the experts received them."""
    taken = []
    for layer in moe_layers(model):
        layer.routed_experts.register_forward_hook(
            lambda module, args, out: taken.append(args[2].sort(-1).values.clone())
        )
    return taken


BLOCK = 32  # KV block size (vLLM's CPU attention: a multiple of 32): the prompt fills one block,
PROMPT = [11] + [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3] * 2 + [13]  # the cache can serve


def moe_engine(checkpoint, swap_mode: str) -> VersionedEngine:
    """An MoE model's engine stepped by hand, with the route capture a generator uses where this
    runs (on a GPU vLLM's export, on its V2 model runner: generation/platform.py, model_runner)."""
    shape = checkpoint.shape
    _model_parallel_groups_with_experts()
    routes = route_capture(shape.moe, shape.n_layers, on_gpu=ON_GPU, swap_mode=swap_mode)
    runner = model_runner(ON_GPU, moe=True, sampling=SamplingConfig(), reads_sampler=False)
    llm = start_llm(checkpoint, swap_mode, runner=runner, block_size=BLOCK, **routes.llm_kwargs())
    return VersionedEngine(llm, swap_mode, routes=routes)


def _model_parallel_groups_with_experts() -> None:
    """vLLM makes its parallel groups once per process, an expert-parallel one only for an MoE model:
    after a dense engine started in this process (another test module's), an MoE engine would find
    the groups made and none for its experts. They are dropped then, for the MoE engine to make anew."""
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return
    try:
        parallel_state.get_ep_group()
    except AssertionError:
        parallel_state.destroy_model_parallel()


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


def assert_routes_of_parallel_samples_and_of_a_cached_prefix(engine: VersionedEngine, checkpoint) -> None:
    """The samples of one request (n=3) and a later request whose prompt the prefix cache serves
    carry the routes TorchTitan's model takes for their tokens (`engine`: prefix caching on)."""
    hf_state_dict = checkpoint.load_hf_state_dict()
    sampled = params(temperature=1.0, seed=3)
    group = [engine.submit(PROMPT, sampled) for _ in range(3)]  # one vLLM request, n=3
    run_to_end(engine)
    cached_tokens = []
    record = engine._record
    engine._record = lambda output: (cached_tokens.append(output.num_cached_tokens), record(output))
    again = engine.submit(PROMPT + [4, 4], params())
    run_to_end(engine)
    engine._record = record

    assert max(cached_tokens) >= BLOCK, "the second request's prompt was not served from the prefix cache"
    assert len({tuple(r.result.token_ids) for r in group}) > 1, "the samples are alike: nothing tells them apart"
    for request in group + [again]:
        assert_routes_of(request.result, checkpoint, hf_state_dict)


def assert_routes_after_an_abort_resume_swap_are_the_new_weights(engine: VersionedEngine, checkpoint) -> None:
    """A request resumed under new weights (abort_resume) carries the new weights' routes for all of
    its tokens (the resumed computation prefilled the whole prefix again). Leaves the engine on the
    checkpoint's weights."""
    old = checkpoint.load_hf_state_dict()
    new = perturbed(old, seed=1)
    request = engine.submit(PROMPT, params())
    for _ in range(4):
        engine.step()
    assert request.token_ids and request.result is None
    engine.swap(new, version=1)
    run_to_end(engine)
    fed = PROMPT + request.result.token_ids[:-1]
    assert (titan_routes(checkpoint, old, fed) != titan_routes(checkpoint, new, fed)).any()
    assert_routes_of(request.result, checkpoint, new)
    engine.swap(old, version=2)
