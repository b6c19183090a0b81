"""The experts a Mixture-of-Experts engine routed each token of a completion to (routing replay).

A completion's routes are an array [prompt + generated - 1, layers, top_k] of uint8 expert ids:
row p holds the experts the token at position p went to in the computation whose KV cache the
completion's next tokens attended to. The last sampled token is never fed to the model, so it has
no row (the layout of vLLM's own export). The trainer's routers replay them (models/routes.py).

Two ways to get them, one interface (`llm_kwargs`, `attach`, `take`):

- `VllmRouteExport` (GPU): vLLM's own export, `enable_return_routed_experts`; the finished output
  carries `routed_experts`. It needs vLLM's V2 model runner, which needs Triton.
- `KvSlotRoutes` (CPU, where vLLM's export cannot start): vLLM's capture hook on every MoE router
  (`bind_routed_experts_capturer`, the hook its export uses) writes each forward's routes into a
  table laid out like the KV cache, one row per KV slot. A finished request's rows are read through
  its block table. A prompt prefix served from the prefix cache was computed by an earlier request
  whose routes sit in the same slots, so cached tokens have rows without being recomputed, and a
  request that vLLM preempted and recomputed has the routes of its recomputation. Reads must come
  right after the step that finished the request, while its blocks are still its own.
"""

import os
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from forge_async.errors import ConfigError
from forge_async.models.shape import UNKNOWN_ROUTE, MoeShape

if TYPE_CHECKING:
    import torch
    from vllm.model_executor.layers.fused_moe.routed_experts_capturer import RoutedExpertsCapturer


def route_capture(moe: MoeShape, num_layers: int, on_gpu: bool, swap_mode: str) -> "KvSlotRoutes | VllmRouteExport":
    """The capture an engine for this model uses where it runs (before vLLM builds the engine)."""
    return VllmRouteExport(swap_mode) if on_gpu else KvSlotRoutes(num_layers, moe.top_k)


def sample_request_id(engine_request_id: str, index: int, samples: int) -> str:
    """vLLM's id of sample `index` of a request it was given with n=`samples` (it runs each sample
    of n > 1 as a child request `{index}_{id}`)."""
    return engine_request_id if samples == 1 else f"{index}_{engine_request_id}"


class VllmRouteExport:
    """vLLM's routed-experts export (GPU engines). vLLM serves it from its V2 model runner only,
    which this selects for the process (VLLM_USE_V2_MODEL_RUNNER=1), and with prefix caching on."""

    def __init__(self, swap_mode: str):
        if swap_mode == "inflight":
            raise ConfigError(
                "generator.swap_mode=inflight: an MoE model's routes come from vLLM's routed-experts "
                "export on a GPU, which needs prefix caching, and inflight turns it off (new requests "
                "would reuse KV of old weights); use drain or abort_resume"
            )
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"

    def llm_kwargs(self) -> dict:
        return {"enable_return_routed_experts": True}

    def attach(self, llm) -> None:
        pass

    def take(self, sample_request_id: str, rows: int, output) -> np.ndarray:
        """The routes of a finished sample, from its last vLLM output."""
        routes = getattr(output, "routed_experts", None)
        if routes is None or len(routes) != rows:
            got = "none" if routes is None else f"{len(routes)} rows"
            raise RuntimeError(f"vLLM returned {got} of routed experts for a sample that fed {rows} tokens")
        return np.asarray(routes, dtype=np.uint8)


class KvSlotRoutes:
    """Routes kept beside the KV cache, one row per KV slot (CPU engines, run in-process)."""

    def __init__(self, num_layers: int, top_k: int):
        self.num_layers = num_layers
        self.top_k = top_k
        self._runner: Any = None  # vLLM's model runner (in_process_runner), once attached
        self._step: torch.Tensor | None = None  # this forward's routes, by token of the batch
        self._step_rows = 0
        self._slots: np.ndarray | None = None  # [KV slots, layers, top_k]

    def llm_kwargs(self) -> dict:
        return {}

    def attach(self, llm) -> None:
        """Hook every MoE router of `llm`'s model and its runner's forward."""
        import torch
        from vllm.model_executor.layers.fused_moe.routed_experts_capturer import bind_routed_experts_capturer

        runner = in_process_runner(llm, "moe routes on CPU")
        self._runner = runner
        self._step = torch.full((runner.max_num_tokens, self.num_layers, self.top_k), UNKNOWN_ROUTE, dtype=torch.uint8)
        slots = runner.kv_cache_config.num_blocks * runner.cache_config.block_size
        self._slots = np.full((slots, self.num_layers, self.top_k), UNKNOWN_ROUTE, dtype=np.uint8)
        # vLLM calls the hook's `capture` alone: this is a capturer in all it uses of one.
        bind_routed_experts_capturer(runner.get_model(), cast("RoutedExpertsCapturer", self))
        forward = runner._model_forward

        def forward_and_keep_routes(*args, **kwargs):
            self._step_rows = 0
            output = forward(*args, **kwargs)
            self._keep_step()
            return output

        runner._model_forward = forward_and_keep_routes

    def capture(self, layer_id: int, topk_ids: "torch.Tensor") -> None:
        """vLLM's router hook: the expert ids of every token of this forward at one layer."""
        step, _ = self._tables()
        step[: len(topk_ids), layer_id] = topk_ids
        self._step_rows = len(topk_ids)

    def _keep_step(self) -> None:
        """Write this forward's routes into the KV slots its tokens' keys and values went to."""
        rows = self._step_rows
        if rows == 0:
            return
        step, kept = self._tables()
        slots = self._runner.input_batch.block_table[0].slot_mapping.gpu[:rows].numpy()
        fed = slots >= 0  # a padding token has slot -1
        kept[slots[fed]] = step[:rows].numpy()[fed]

    def take(self, sample_request_id: str, rows: int, output=None) -> np.ndarray:
        """The routes of positions 0..rows-1 of a sample that finished in the last engine step."""
        _, kept = self._tables()
        state = self._runner.requests.get(sample_request_id)
        if state is None:
            raise RuntimeError(f"vLLM request {sample_request_id!r} is gone: routes are read right after it finishes")
        block_size = self._runner.cache_config.block_size
        blocks = np.asarray(state.block_ids[0], dtype=np.int64)
        positions = np.arange(rows)
        return kept[blocks[positions // block_size] * block_size + positions % block_size]

    def _tables(self) -> tuple["torch.Tensor", np.ndarray]:
        """This forward's routes and the KV slots' (made by `attach`)."""
        if self._step is None or self._slots is None:
            raise RuntimeError("KvSlotRoutes is used before attach(llm) made its tables")
        return self._step, self._slots


def in_process_runner(llm, what: str):
    """The model runner of an engine whose worker lives in this process (an engine core in a
    process of its own could not hand its runner over); `what` needs it."""
    import vllm.envs

    if vllm.envs.VLLM_ENABLE_V1_MULTIPROCESSING:
        raise ConfigError(
            f"{what} are read from vLLM's model runner, in the engine's own process: "
            "VLLM_ENABLE_V1_MULTIPROCESSING must be 0 (forge_async's runtime sets it)"
        )
    return llm.collective_rpc(_model_runner)[0]


def _model_runner(worker):
    return worker.model_runner
