"""How a weight swap writes a new version into a vLLM engine's model.

vLLM's CPU backend repacks each linear layer's weight for oneDNN when the model loads and
drops the plain tensor. New weights then go through vLLM's `reload_weights`, which rebuilds
every layer on the meta device, loads it and packs it again: mostly Python, and on a tiny
model, at one swap a step, a large share of the generator's time.

With `generator.cpu_weights=plain` the engine is built with oneDNN packing off
(`plain_cpu_weights`): every linear layer keeps its weight and runs vLLM's torch-linear
fallback on it, and a swap is vLLM's own `model.load_weights` copying each tensor into place:
a much shorter swap, and decode as fast as packed for small models but slower for larger
ones (docs/benchmarks.md, generation pause per weight swap). On a GPU, and for an engine
whose layers are packed, a swap stays vLLM's `reload_weights`.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # light: the generator's config imports this module before torch is loaded
    import torch


@contextmanager
def plain_cpu_weights(enabled: bool = True) -> Iterator[None]:
    """Engines built (and layers re-dispatched) inside keep their linear weights unpacked on CPU."""
    from vllm import _custom_ops

    packs = _custom_ops._supports_onednn
    if enabled:
        _custom_ops._supports_onednn = False
    try:
        yield
    finally:
        _custom_ops._supports_onednn = packs


def loads_in_place(llm) -> bool:
    """Whether `llm` runs on CPU with every linear layer's weight kept (built under plain_cpu_weights)."""
    return llm.collective_rpc(_loads_in_place)[0]


def load_in_place(llm, state_dict: dict[str, "torch.Tensor"]) -> None:
    """Copy `state_dict` (Hugging Face names) into the engine's weights with vLLM's loader."""
    llm.collective_rpc(_load_in_place, args=(list(state_dict.items()),))


def reload(llm, state_dict: dict[str, "torch.Tensor"]) -> None:
    """vLLM's layer-wise reload: any engine, any kernel layout."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})


def _cpu_gemm_layers(model: "torch.nn.Module") -> list["torch.nn.Module"]:
    """The layers whose matmul vLLM's CPU backend dispatched (each has a `cpu_linear`)."""
    return [module for module in model.modules() if hasattr(module, "cpu_linear")]


def _loads_in_place(worker) -> bool:
    layers = _cpu_gemm_layers(worker.model_runner.get_model())
    # A linear layer's weight is a tensor (Module's attribute typing says tensor or module).
    return bool(layers) and all(cast("torch.Tensor", layer.weight).numel() > 0 for layer in layers)


def _load_in_place(worker, weights: list[tuple[str, "torch.Tensor"]]) -> None:
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    model = worker.model_runner.get_model()
    model.load_weights(weights)
    # A layer that keeps its weight may still run on a packed copy of it (the output head,
    # with some CPU kernels): dispatching again builds that copy from the new weight.
    with plain_cpu_weights():
        for layer in _cpu_gemm_layers(model):
            dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    _pack_experts(model)


def _pack_experts(model: "torch.nn.Module") -> None:
    """Lay each MoE layer's experts out for its kernel again. vLLM's CPU experts keep their
    weights in a packed layout of the same shape, which its loader writes over with plain
    rows; its own weight-update path does not pack them again (vLLM 0.32), so it is done here."""
    for layer in model.modules():
        kernel = getattr(getattr(layer, "quant_method", None), "moe_kernel", None)
        if kernel is not None:
            kernel.fused_experts.process_weights_after_loading(layer)
