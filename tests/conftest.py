"""Shared fixtures: a tiny checkpoint, a torchstore, and one vLLM generator per session.

Everything here is real: vLLM engine, Monarch procs, TorchTitan + FSDP2 over gloo,
torchstore. Tests talk to actors synchronously through Monarch futures (`.get()`).
"""

import asyncio
import os
import subprocess

import pytest

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.generation.config import GeneratorConfig
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.handles import meshes
from forge_async.mesh.procs import keep_controller_alive_on_faults, shut_down_monarch
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig, MoeConfig, TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.weights import store
from forge_async.weights.config import WeightsConfig

PAD_ID = build_digit_tokenizer().pad_token_id

# A proc that fails after its test's calls (killed, out of memory, stopped late) is noted on stderr;
# Monarch's default ends this process with a KeyboardInterrupt, whichever test is running then.
keep_controller_alive_on_faults()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Checkpoint:
    return Checkpoint.open(create_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model"))


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


def spawn_generator(
    checkpoint: Checkpoint, weights: WeightsConfig | None = None, lora: LoraConfig | None = None, **overrides
):
    """A generator, by default on the torchstore transport: it loads versions only when told to.
    Returns (procs, generator); the caller stops it with `meshes.stop_all(procs)`."""
    config = GeneratorConfig(cpu_threads_bind="0", kv_cache_gib=0.25, **overrides)
    weights = weights or WeightsConfig("torchstore")
    procs, generator, _ = asyncio.run(meshes.spawn_generator(checkpoint, config, weights, lora=lora))
    return procs, generator


@pytest.fixture(scope="session")
def generator(tiny_checkpoint, weight_store):
    procs, generator = spawn_generator(tiny_checkpoint)
    yield generator
    asyncio.run(meshes.stop_all(procs))


def spawn_trainer(
    checkpoint: Checkpoint, procs: int, weights: WeightsConfig | None = None, lora: LoraConfig | None = None,
    moe: MoeConfig | None = None, **overrides,
):
    """A fresh trainer mesh (the caller stops it with `meshes.stop_all`)."""
    config = TrainerConfig(procs=procs, lr_schedule="constant", **overrides)  # no run for a decay to span
    weights = weights or WeightsConfig("torchstore")
    return asyncio.run(meshes.spawn_trainer(LearnerSpec(str(checkpoint.path), config, PAD_ID, lora=lora, moe=moe), weights))


@pytest.fixture(scope="session", autouse=True)
def _shutdown_monarch():
    yield
    shut_down_monarch()


def fixed_sequences() -> list[list[int]]:
    """Digit-task token sequences (BOS digits SEP answer EOS) used to compare models."""
    return [
        [11, 3, 1, 4, 13, 4, 12],
        [11, 9, 2, 6, 13, 9, 12],
        [11, 0, 5, 5, 13, 5],
        [11, 7, 7, 1, 13, 2, 3, 4],
    ]


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
