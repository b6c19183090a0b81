"""Parallelize a finished TorchTitan model from outside the model code, with TorchTitan's own
components: activation checkpointing, per-block torch.compile, then FSDP2 (in that order).

TorchTitan is imported where it is applied: the trainer's actor module imports this one, and
so does the controller that spawns it, which needs no TorchTitan (a heavy import at start-up).
The trainer passes its config's values in: models/ knows nothing of the actors' configs.
"""

from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

if TYPE_CHECKING:
    from torchtitan.distributed import ParallelDims
    from torchtitan.models.common.decoder import Decoder


def parallelize(
    model: "Decoder",
    device_type: str,
    *,
    dtype: str,
    activation_checkpointing: str = "none",
    compile: bool = False,
    expert_parallel: int = 1,
) -> nn.Module:
    """With `expert_parallel` > 1, the experts of every MoE layer split across that many ranks
    (the model built with `expert_parallel=True`: models/titan.py); activation checkpointing
    ("none" | "full" | "selective") and compile per transformer block; then FSDP2 over every
    rank computing in `dtype` ("float32" | "bfloat16"), unless there is nothing for it to do:
    see `shards`."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    dims = _expert_parallel_dims(device_type, expert_parallel) if expert_parallel > 1 else None
    if dims is not None:
        model.parallelize(dims)  # experts sharded over "ep"; the dispatchers' all-to-all wired to it
    if activation_checkpointing == "full":
        FullAC(FullAC.Config()).apply(model)
    elif activation_checkpointing == "selective":
        SelectiveAC(SelectiveAC.Config()).apply(model)
    if compile:
        # TorchTitan's apply_compile does this too, but wants its ParallelDims (TP, PP, ...).
        for block in model.layers.values():
            block.compile(fullgraph=True)
    if dims is None and not shards(dtype):
        return model
    return _apply_fsdp(model, device_type, getattr(torch, dtype), dims)


def shards(dtype: str) -> bool:
    """Whether a model computing in `dtype` goes under FSDP2: with more than one rank, or for
    bfloat16's mixed precision (fp32 master weights). One fp32 rank is left a plain module:
    FSDP2 would shard nothing, and its hooks and DTensor dispatch are a sizeable share of a
    tiny model's CPU step (docs/benchmarks.md, Pipeline)."""
    return dist.get_world_size() > 1 or dtype != "float32"


def unsharded(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor gathered from every rank (a collective), a plain one as is."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


@cache
def _expert_parallel_dims(device_type: str, expert_parallel: int) -> "ParallelDims":
    """TorchTitan's meshes for FSDP over every rank with the experts split over `expert_parallel`
    of them: "fsdp" (all ranks) for the dense weights, "ep" x "efsdp" (the experts' FSDP over the
    ranks left) for the experts. One per process: the policy and a reference share its groups.
    DTensor placements resolve the TorchTitan way (`partial_dtensor`): only "ep" (and "tp") are
    in the modules' own sharding; FSDP takes the data-parallel axes."""
    from torchtitan.distributed import ParallelDims, parallel_dims
    from torchtitan.distributed.utils import set_spmd_backend

    set_spmd_backend("partial_dtensor")  # the dispatcher's all-to-all: plain functional collectives
    # TorchTitan builds its meshes on the accelerator it found at import, "cuda" when none:
    # a CPU trainer's meshes are CPU (gloo) ones.
    parallel_dims.device_type = device_type
    dims = ParallelDims(
        dp_replicate=1,
        dp_shard=-1,
        cp=1,
        tp=1,
        pp=1,
        ep=expert_parallel,
        world_size=dist.get_world_size(),
        spmd_backend="partial_dtensor",
    )
    dims.build_mesh()
    return dims


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float, expert_parallel: int = 1) -> torch.Tensor:
    """Clip the gradients to a total norm of `max_norm`; returns the norm before clipping. With
    experts split over ranks their gradients live on another mesh than the rest's, so the two
    norms are taken apart and combined (TorchTitan's clipping)."""
    if expert_parallel == 1:
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    from torchtitan.distributed.utils import clip_grad_norm_

    return clip_grad_norm_(list(parameters), max_norm, ep_enabled=True)


def experts_unsharded(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state_dict` with the weights of experts split across ranks (DTensors on an "ep" mesh)
    gathered whole (a collective), the rest as they are. TorchTitan's Hugging Face adapter turns
    such a DTensor into this rank's experts alone; a whole one, into every expert."""
    return {name: unsharded(t) if _on_expert_mesh(t) else t for name, t in state_dict.items()}


def _on_expert_mesh(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, DTensor) and "ep" in (tensor.device_mesh.mesh_dim_names or ())


def _apply_fsdp(
    model: nn.Module, device_type: str, param_dtype: torch.dtype, dims: "ParallelDims | None" = None
) -> nn.Module:
    """Shard each transformer block, the embeddings and the head, then the root, across all ranks;
    with expert parallelism (`dims`), each MoE layer's experts across the ranks of their "efsdp"
    mesh (those holding the same experts).

    Mixed precision: parameters are gathered and computed in `param_dtype`; the sharded
    master weights, the optimizer state and the gradient reduction stay fp32.
    Gradients are *summed* across ranks (TorchTitan disables the division): the loss of
    each rank is already its share of the global-batch mean, so the sum is the
    full-batch gradient, whatever the number of ranks. gloo has no PREMUL_SUM, so all
    reductions are forced to plain sums.
    """
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    if dims is None:
        mesh, experts = init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("dp",)), {}
    else:
        mesh, experts = dims.get_mesh("fsdp"), {"ep_degree": dims.ep, "edp_mesh": dims.get_mesh("efsdp")}
    apply_fsdp_to_decoder(model, mesh, param_dtype=param_dtype, reduce_dtype=torch.float32, pp_enabled=False, **experts)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
    return model
