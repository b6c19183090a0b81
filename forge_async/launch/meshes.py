"""Spawn each actor mesh and bring it to a ready state.

These are the building blocks a user composes in their own script (see
docs/compose.md); the GRPO app uses the same functions. Each takes the host
mesh to spawn on (default: this host; see hosts.py for other nodes) and, with
`log_dir`, send their procs' stdout/stderr to LOG_DIR/<mesh name>.log (console.py).
"""

from functools import partial
from pathlib import Path

from monarch.actor import HostMesh, ProcMesh, this_host
from monarch.spmd import setup_torch_elastic_env_async

from forge_async.actors.generator import Generator, GeneratorConfig
from forge_async.actors.replay_buffer import ReplayBuffer
from forge_async.actors.trainer import Trainer, TrainerConfig
from forge_async.actors.weight_relay import WeightRelay
from forge_async.console import send_output_to_log
from forge_async.models.checkpoint import Checkpoint
from forge_async.weights.config import WeightsConfig


def spawn_procs(host: HostMesh | None, procs: int, name: str, log_dir: Path | None) -> ProcMesh:
    bootstrap = None if log_dir is None else partial(send_output_to_log, str(log_dir), name)
    return (host or this_host()).spawn_procs(per_host={"procs": procs}, bootstrap=bootstrap, name=name)


async def spawn_trainer(
    checkpoint: Checkpoint,
    config: TrainerConfig,
    pad_id: int,
    weights: WeightsConfig,
    hosts: HostMesh | None = None,
    log_dir: Path | None = None,
):
    """A Trainer on `config.procs` procs per host, torch.distributed initialised, weights loaded.

    Across several hosts, rank 0's node address (and a free port there) is the
    rendezvous point of the process group.
    """
    procs = spawn_procs(hosts, config.procs, "trainer", log_dir)
    trainer = procs.spawn("trainer", Trainer, str(checkpoint.path), config, pad_id, weights)
    if hosts is None:
        await setup_torch_elastic_env_async(procs)
    else:
        first = await trainer.slice(**{label: 0 for label in procs._labels}).free_address.call_one()
        await setup_torch_elastic_env_async(procs, *first)
    await trainer.setup.call()
    return procs, trainer


async def spawn_generator(
    checkpoint: Checkpoint,
    config: GeneratorConfig,
    weights: WeightsConfig,
    index: int = 0,
    host: HostMesh | None = None,
    log_dir: Path | None = None,
):
    """One Generator (one proc, one vLLM engine) loaded with the checkpoint's weights."""
    procs = spawn_procs(host, 1, f"generator{index}", log_dir)
    generator = procs.spawn(
        f"generator{index}", Generator, str(checkpoint.path), config, weights
    )
    timing = await generator.setup.call_one()
    return procs, generator, timing


async def spawn_replay_buffer(
    max_policy_age: int, capacity: int, host: HostMesh | None = None, log_dir: Path | None = None
):
    procs = spawn_procs(host, 1, "replay_buffer", log_dir)
    buffer = procs.spawn("replay_buffer", ReplayBuffer, max_policy_age, capacity)
    return procs, buffer


async def spawn_weight_relay(channel_dir: str, host: HostMesh, node: int, log_dir: Path | None = None):
    """A WeightRelay on `host`: torchstore -> that host's shared-memory channel at `channel_dir`."""
    procs = spawn_procs(host, 1, f"weight_relay{node}", log_dir)
    return procs, procs.spawn(f"weight_relay{node}", WeightRelay, channel_dir)


async def stop_all(*meshes: ProcMesh) -> None:
    for procs in meshes:
        await procs.stop()
