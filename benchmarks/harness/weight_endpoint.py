"""State dicts of given sizes, and the actor that holds one as a writer (the trainer's side) or
as a reader's preallocated tensors (the generator's side) of a weight transfer."""

import tempfile
import time
from pathlib import Path

import torch
from monarch.actor import Actor, endpoint

from forge_async.models.config import LoraConfig, TinyModelConfig
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.peft import zero_adapter
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.weights import store
from forge_async.weights.shared_memory import SharedMemoryChannel

LAYER_PARAMS = 4 * 1024 * 1024  # ~4M parameters per tensor, like one projection of a 1-2B model
MODELS = {  # the tiny default model and one of ~100M parameters (as benchmarks/components/checkpoint_cost.py)
    "tiny": TinyModelConfig(),
    "100m": TinyModelConfig(dim=768, n_layers=11, n_heads=12, head_dim=64, ffn_dim=3072),
}
Shapes = dict[str, tuple[int, ...]]


def synthetic_shapes(millions: int) -> Shapes:
    count = max(1, millions * 1_000_000 // LAYER_PARAMS)
    return {f"layers.{i}.weight": (LAYER_PARAMS // 1024, 1024) for i in range(count)}


def model_shapes(model: str, rank: int) -> tuple[Shapes, Shapes]:
    """A model's weight shapes (HF names) and its LoRA adapters' (PEFT names) on the default targets."""
    with tempfile.TemporaryDirectory() as tmp:
        weights = Checkpoint.open(create_tiny_checkpoint(Path(tmp) / "model", MODELS[model])).weight_shapes()
    adapter = zero_adapter(weights, LoraConfig(rank=rank), torch.float32)
    return weights, {name: tuple(t.shape) for name, t in adapter.items()}


def make_state_dict(shapes: Shapes) -> dict[str, torch.Tensor]:
    return {name: torch.randn(shape) for name, shape in shapes.items()}


def nbytes(shapes: Shapes) -> int:
    return sum(torch.Size(shape).numel() * 4 for shape in shapes.values())


class Endpoint(Actor):
    """Holds a state dict (writer) or preallocated destination tensors (reader)."""

    def __init__(self, shapes: Shapes, channel_dir: str):
        torch.set_num_threads(1)
        self.state_dict = make_state_dict(shapes)
        self.channel = SharedMemoryChannel(channel_dir)

    @endpoint
    async def write_shm(self, version: int) -> float:
        start = time.perf_counter()
        self.channel.write(version, self.state_dict)
        return time.perf_counter() - start

    @endpoint
    async def read_shm(self) -> float:
        start = time.perf_counter()
        with self.channel.reading(self.channel.latest()) as (_, views):
            for name, view in views.items():
                self.state_dict[name].copy_(view)
        return time.perf_counter() - start

    @endpoint
    async def put_torchstore(self, version: int) -> float:
        start = time.perf_counter()
        await store.put_policy(self.state_dict, version)
        return time.perf_counter() - start

    @endpoint
    async def get_torchstore(self, version: int) -> float:
        start = time.perf_counter()
        fetched = await store.get_policy(version)
        for name, tensor in fetched.items():
            self.state_dict[name].copy_(tensor)
        elapsed = time.perf_counter() - start
        await store.delete_versions_before(version + 1)
        return elapsed

    @endpoint
    async def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.state_dict.values()))
