"""A generator or a trainer mesh of the tiny model, spawned in the test process."""

import asyncio

from forge_async.generation.config import GeneratorConfig
from forge_async.handles import meshes
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.models.config import LoraConfig, MoeConfig
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.weights.config import WeightsConfig
from tests.support.digits import PAD_ID


def spawn_generator(
    checkpoint: Checkpoint, weights: WeightsConfig | None = None, lora: LoraConfig | None = None, **overrides
):
    """A generator, by default on the torchstore transport: it loads versions only when told to.
    Returns (procs, generator); the caller stops it with `meshes.stop_all(procs)`."""
    config = GeneratorConfig(cpu_threads_bind="0", kv_cache_gib=0.25, **overrides)
    weights = weights or WeightsConfig("torchstore")
    procs, generator, _ = asyncio.run(meshes.spawn_generator(checkpoint, config, weights, lora=lora))
    return procs, generator


def spawn_trainer(
    checkpoint: Checkpoint,
    procs: int,
    weights: WeightsConfig | None = None,
    lora: LoraConfig | None = None,
    moe: MoeConfig | None = None,
    **overrides,
):
    """A fresh trainer mesh (the caller stops it with `meshes.stop_all`)."""
    config = TrainerConfig(procs=procs, lr_schedule="constant", **overrides)  # no run for a decay to span
    weights = weights or WeightsConfig("torchstore")
    return asyncio.run(
        meshes.spawn_trainer(LearnerSpec(str(checkpoint.path), config, PAD_ID, lora=lora, moe=moe), weights)
    )
