"""The trainer side of weight delivery: each rank hands its shard of a version to the
push targets (route.py) the controller names.

"shm": every rank copies its local shard into the version's slot of this node's
shared-memory channel at the shard's global offset (every rank on this node), and
rank 0 publishes the slot once all have written. "torchstore": one DTensor shard
per rank into the store, for relays and generators on other nodes.
"""

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from forge_async.weights.config import WeightsConfig
from forge_async.weights.shared_memory import SharedMemoryChannel, plan_layout


class WeightPublisher:
    def __init__(self, weights: WeightsConfig):
        self.default_targets = (weights.transport,)
        self.channel = SharedMemoryChannel(weights.channel_dir) if weights.channel_dir else None

    async def publish(self, version: int, state_dict: dict[str, torch.Tensor], targets: tuple[str, ...] | None) -> int:
        """`state_dict` (this rank's view: DTensors under FSDP) as `version`, to each of `targets`
        (default: the configured transport); returns the bytes of one whole version."""
        for target in targets or self.default_targets:
            if target == "shm":
                if self.channel is None:
                    raise ValueError("publishing to 'shm' needs weights.channel_dir")
                self._write_shared_memory(version, state_dict)
            else:
                from forge_async.weights import store  # heavy to import: only for its transport

                await store.put_policy(state_dict, version)
        return sum(t.numel() * t.element_size() for t in state_dict.values())

    def _write_shared_memory(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        """Every rank copies its local shard into the version's slot at the shard's global offset."""
        header, _, size = plan_layout({name: (tuple(t.shape), t.dtype) for name, t in state_dict.items()})
        rank = dist.get_rank()
        if rank == 0:
            self.channel.begin_write(version, header, size)  # waits for readers of the slot
        dist.barrier()
        views = self.channel.tensor_views(version, header)
        for name, tensor in state_dict.items():
            local, offset = local_shard(tensor)
            full = views[name]
            full[tuple(slice(o, o + n) for o, n in zip(offset, local.shape))].copy_(local)
        dist.barrier()
        if rank == 0:
            self.channel.publish(version)


def local_shard(tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """This rank's piece of a (possibly DTensor) tensor and its offset in the full tensor."""
    if not isinstance(tensor, DTensor):
        return tensor.detach(), (0,) * tensor.dim()
    _, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return tensor.to_local().detach(), tuple(offset)
