"""The trainer side of weight delivery: each rank hands its shard of a version to the
push targets (route.py) the controller names.

"shm": every rank copies its local shard into the version's slot of this node's
shared-memory channel at the shard's global offset (every rank on this node), and
rank 0 publishes the slot once all have written. "torchstore": one DTensor shard
per rank into the store, for relays and generators on other nodes.
"""

import logging

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from forge_async.weights.config import WeightsConfig
from forge_async.weights.shared_memory import SharedMemoryChannel, plan_layout

logger = logging.getLogger(__name__)


class WeightPublisher:
    def __init__(self, weights: WeightsConfig, page_lock: bool = True):
        """`page_lock`: copy GPU tensors into shared memory registered with CUDA (see `_page_lock`);
        False copies into pageable memory (benchmarks/components/gpu_trainer.py compares the two)."""
        self.default_targets = (weights.transport,)
        self.channel = SharedMemoryChannel(weights.channel_dir) if weights.channel_dir else None
        self._page_locked: dict[int, torch.Tensor] = {}  # slot -> its mapping, registered with CUDA
        self._may_page_lock = page_lock  # False once CUDA refuses

    async def publish(self, version: int, state_dict: dict[str, torch.Tensor], targets: tuple[str, ...] | None) -> int:
        """`state_dict` (this rank's view: DTensors under FSDP) as `version`, to each of `targets`
        (default: the configured transport); returns the bytes of one whole version."""
        for target in targets or self.default_targets:
            if target == "shm":
                if self.channel is None:
                    raise ValueError("publishing to 'shm' needs weights.channel_dir")
                self._write_shared_memory(self.channel, version, state_dict)
            else:
                from forge_async.weights import store  # heavy to import: only for its transport

                await store.put_policy(state_dict, version)
        return sum(t.numel() * t.element_size() for t in state_dict.values())

    def _write_shared_memory(
        self, channel: SharedMemoryChannel, version: int, state_dict: dict[str, torch.Tensor]
    ) -> None:
        """Every rank copies its local shard into the version's slot at the shard's global offset."""
        header, _, size = plan_layout({name: (tuple(t.shape), t.dtype) for name, t in state_dict.items()})
        rank = dist.get_rank()
        if rank == 0:
            channel.begin_write(version, header, size)  # waits for readers of the slot
        dist.barrier()
        views = channel.tensor_views(version, header)
        from_gpu = next(iter(state_dict.values())).device.type == "cuda"
        page_locked = from_gpu and self._page_lock(*channel.slot_mapping(version))
        for name, tensor in state_dict.items():
            local, offset = local_shard(tensor)
            full = views[name]
            full[tuple(slice(o, o + n) for o, n in zip(offset, local.shape))].copy_(local, non_blocking=page_locked)
        if page_locked:
            torch.cuda.synchronize()  # the copies ran asynchronously: done before the slot is published
        dist.barrier()
        if rank == 0:
            channel.publish(version)

    def close(self) -> None:
        """Unregister the page-locked mappings (before their files go; a process's exit does it too)."""
        for mapping in self._page_locked.values():
            torch.cuda.cudart().cudaHostUnregister(mapping.data_ptr())
        self._page_locked.clear()

    def _page_lock(self, slot: int, mapping: torch.Tensor) -> bool:
        """Register a slot's mapping with CUDA once (page-locked), so that GPU tensors are copied
        into it by DMA: into pageable memory a GPU copy goes through a staging buffer, several
        times slower (benchmarks/components/gpu_trainer.py times the publish both ways).
        False, with a warning, where CUDA refuses (the copies then run as before)."""
        held = self._page_locked.get(slot)
        if held is not None and held.data_ptr() == mapping.data_ptr():
            return True
        if not self._may_page_lock:
            return False
        cudart = torch.cuda.cudart()
        if held is not None:  # the slot's file was replaced: its old mapping goes
            cudart.cudaHostUnregister(held.data_ptr())
            del self._page_locked[slot]
        error = cudart.cudaHostRegister(mapping.data_ptr(), mapping.numel(), 0)  # a uint8 mapping
        if error != 0:
            self._may_page_lock = False
            logger.warning(
                "weights: page-locking the shared-memory slot failed (CUDA error %s); publishing unpinned", int(error)
            )
            return False
        self._page_locked[slot] = mapping
        return True


def local_shard(tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """This rank's piece of a (possibly DTensor) tensor and its offset in the full tensor."""
    if not isinstance(tensor, DTensor):
        return tensor.detach(), (0,) * tensor.dim()
    _, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    return tensor.to_local().detach(), tuple(offset)
