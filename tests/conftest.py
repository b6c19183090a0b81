"""Shared fixtures: a tiny checkpoint, a torchstore, and one vLLM generator per session.

Everything here is real: vLLM engine, Monarch procs, TorchTitan + FSDP2 over gloo,
torchstore. Tests talk to actors synchronously through Monarch futures (`.get()`).
"""

import asyncio
import os
import subprocess

import pytest

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.handles import meshes
from forge_async.mesh.procs import keep_controller_alive_on_faults, shut_down_monarch
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.weights import store
from tests.support.meshes import spawn_generator

# A proc that fails after its test's calls (killed, out of memory, stopped late) is noted on stderr;
# Monarch's default ends this process with a KeyboardInterrupt, whichever test is running then.
keep_controller_alive_on_faults()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Checkpoint:
    return Checkpoint.open(create_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def adapter_slot(tiny_checkpoint):
    """The LoRA adapter slot (rank 4) an engine of `lora_llm` serves: vLLM is imported here only."""
    import torch

    from forge_async.generation.adapter_slot import AdapterSlot
    from forge_async.models.config import LoraConfig

    return AdapterSlot(LoraConfig(rank=4), tiny_checkpoint, torch.float32)


@pytest.fixture(scope="module")
def lora_llm(tiny_checkpoint, adapter_slot):
    """An engine serving the checkpoint + one LoRA adapter, in this test process."""
    from tests.support.vllm_engine import start_llm

    return start_llm(tiny_checkpoint, **adapter_slot.llm_kwargs())


@pytest.fixture(scope="session")
def weight_store():
    asyncio.run(store.start_store())
    yield store.STORE_NAME
    asyncio.run(store.stop_store())


@pytest.fixture(scope="session")
def tiny_llama_checkpoint(tmp_path_factory) -> Checkpoint:
    model = tmp_path_factory.mktemp("tiny_llama") / "model"
    return Checkpoint.open(create_tiny_checkpoint(model, TinyModelConfig(family="llama")))


@pytest.fixture(scope="session")
def tiny_moe_checkpoint(tmp_path_factory) -> Checkpoint:
    model = tmp_path_factory.mktemp("tiny_moe") / "model"
    return Checkpoint.open(create_tiny_checkpoint(model, TinyModelConfig(family="qwen3_moe")))


@pytest.fixture(scope="session")
def generator(tiny_checkpoint, weight_store):
    procs, generator = spawn_generator(tiny_checkpoint)
    yield generator
    asyncio.run(meshes.stop_all(procs))


@pytest.fixture(scope="session", autouse=True)
def _shutdown_monarch():
    yield
    shut_down_monarch()


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB filesystem (tmpfs): room for the tiny model's run files and a checkpoint or two."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("mounting a tmpfs needs root (CI runs as root and never skips this)")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)
