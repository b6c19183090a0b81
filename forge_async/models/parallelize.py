"""Parallelize a finished TorchTitan model from outside the model code, with TorchTitan's own
components: activation checkpointing, per-block torch.compile, then FSDP2 (in that order).

TorchTitan is imported where it is applied: the trainer's actor module imports this one, and
so does the controller that spawns it, which needs no TorchTitan (a heavy import at start-up).
The trainer passes its config's values in: models/ knows nothing of the actors' configs.
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor


def parallelize(
    model: nn.Module,
    device_type: str,
    *,
    dtype: str,
    activation_checkpointing: str = "none",
    compile: bool = False,
) -> nn.Module:
    """Activation checkpointing ("none" | "full" | "selective") and compile per transformer
    block, then FSDP2 over every rank computing in `dtype` ("float32" | "bfloat16"), unless
    there is nothing for it to do: see `shards`."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    if activation_checkpointing == "full":
        FullAC(FullAC.Config()).apply(model)
    elif activation_checkpointing == "selective":
        SelectiveAC(SelectiveAC.Config()).apply(model)
    if compile:
        # TorchTitan's apply_compile does this too, but wants its ParallelDims (TP, PP, ...).
        for block in model.layers.values():
            block.compile(fullgraph=True)
    if not shards(dtype):
        return model
    return _apply_fsdp(model, device_type, getattr(torch, dtype))


def shards(dtype: str) -> bool:
    """Whether a model computing in `dtype` goes under FSDP2: with more than one rank, or for
    bfloat16's mixed precision (fp32 master weights). One fp32 rank is left a plain module:
    FSDP2 would shard nothing, and its hooks and DTensor dispatch are a sizeable share of a
    tiny model's CPU step (docs/benchmarks.md, Pipeline)."""
    return dist.get_world_size() > 1 or dtype != "float32"


def unsharded(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor gathered from every rank (a collective), a plain one as is."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _apply_fsdp(model: nn.Module, device_type: str, param_dtype: torch.dtype) -> nn.Module:
    """Shard each transformer block, the embeddings and the head, then the root, across all ranks.

    Mixed precision: parameters are gathered and computed in `param_dtype`; the sharded
    master weights, the optimizer state and the gradient reduction stay fp32.
    Gradients are *summed* across ranks (TorchTitan disables the division): the loss of
    each rank is already its share of the global-batch mean, so the sum is the
    full-batch gradient, whatever the number of ranks. gloo has no PREMUL_SUM, so all
    reductions are forced to plain sums.
    """
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    mesh = init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    apply_fsdp_to_decoder(model, mesh, param_dtype=param_dtype, reduce_dtype=torch.float32, pp_enabled=False)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
    return model
