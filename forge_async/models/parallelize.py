"""Apply FSDP2 to a finished TorchTitan model, from outside the model code."""

import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard


def apply_fsdp(model: nn.Module, device_type: str) -> nn.Module:
    """Shard each transformer block, then the root, across all ranks of the default group.

    Gradients are *summed* across ranks (divide factor 1): the loss of each rank is
    already its share of the global-batch mean, so the sum is the full-batch
    gradient, whatever the number of ranks. gloo has no PREMUL_SUM, so all
    reductions are forced to plain sums.
    """
    mesh = init_device_mesh(device_type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    for block in model.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model
