"""Spawn each actor mesh and bring it to a ready state.

The building blocks of the GRPO app's handles (handles/spawner.py) and of a composed script
(forge_async/compose/: `Composition`, which calls these with the configs it resolved, and stops
what they spawned). Each takes the host mesh to spawn on (default: this host; see hosts.py for
other nodes) and, with `log_dir`, sends its procs' stdout/stderr to LOG_DIR/<mesh name>.log
(observability/console.py); or, with `procs`, uses procs spawned earlier (see procs.py: the app
spawns them first). Settings an actor could not start with are refused here, as a ConfigError
naming them, before any proc starts.
"""

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from monarch.actor import HostMesh, ProcMesh
from monarch.spmd import setup_torch_elastic_env_async

from forge_async.actors.environment_host import EnvironmentHost
from forge_async.actors.generator import Generator
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.generation.platform import EngineStarted
from forge_async.actors.logprob_model import LogprobModel
from forge_async.actors.replay_buffer import ReplayBuffer
from forge_async.actors.trainer import Trainer
from forge_async.actors.tiny_model_writer import TinyModelWriter
from forge_async.learning.spec import LearnerSpec
from forge_async.actors.weight_relay import WeightRelay
from forge_async.actors.weight_sender import WeightSender
from forge_async.data.buffer import check_settings
from forge_async.errors import ConfigError
from forge_async.mesh.procs import spawn_procs
from forge_async.mesh.supervision import stop_quietly
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig
from forge_async.observability.console import since_launch
from forge_async.weights.config import WeightsConfig

T = TypeVar("T")


async def spawn_trainer(
    spec: LearnerSpec,
    weights: WeightsConfig,
    hosts: HostMesh | None = None,
    log_dir: Path | None = None,
    procs: ProcMesh | None = None,
) -> tuple[ProcMesh, Any]:
    """A Trainer on `spec.config.procs` procs per host, torch.distributed initialised, weights loaded.

    Across several hosts, rank 0's node address (and a free port there) is the
    rendezvous point of the process group.
    """
    check_weights(weights)
    check_schedule(spec)

    async def start(procs: ProcMesh) -> Any:
        trainer = procs.spawn("trainer", Trainer, spec, weights)
        if hosts is None:
            await setup_torch_elastic_env_async(procs)
        else:
            first = await first_actor(trainer, procs).free_address.call_one()
            await setup_torch_elastic_env_async(procs, *first)
        await trainer.setup.call()
        return trainer

    return await _started(procs, lambda: spawn_procs(hosts, spec.config.procs, "trainer", log_dir), start)


async def _started(
    procs: ProcMesh | None, spawn: Callable[[], ProcMesh], start: Callable[[ProcMesh], Awaitable[T]]
) -> tuple[ProcMesh, T]:
    """`start(procs)`'s actor on `procs`, or on new procs from `spawn()`, which are stopped if it
    fails (however: an error, a cancel); procs a caller passed are the caller's to stop."""
    if procs is not None:
        return procs, await start(procs)
    procs = spawn()
    try:
        return procs, await start(procs)
    except BaseException:
        await stop_quietly(procs)
        raise


def check_weights(weights: WeightsConfig) -> None:
    """Weights whose transport can run as they are, or a ConfigError: over shared memory, the
    trainer and its generators meet at one channel directory, which a config with none set does
    not name yet (`WeightsConfig.resolved()` chooses one: pass the same resolved config to all)."""
    if weights.transport == "shm" and weights.channel_dir is None:
        raise ConfigError(
            "weights.channel_dir is null with weights.transport 'shm': the trainer and its generators "
            "meet at one channel directory; pass them all one `WeightsConfig(...).resolved()`, or spawn "
            "them in a `forge_async.compose.Composition`, which chooses it and removes it at the end"
        )


def check_schedule(spec: LearnerSpec) -> None:
    """A learning-rate schedule the trainer can build from `spec` alone, or a ConfigError: a decay
    needs the steps it spans (the app sets them to its `steps`)."""
    c = spec.config
    if c.lr_schedule != "constant" and c.lr_total_steps is None:
        raise ConfigError(
            f"trainer.lr_schedule={c.lr_schedule!r} needs trainer.lr_total_steps (the steps its decay spans); "
            "a trainer of your own takes TrainerConfig(lr_schedule='constant') or both"
        )


async def write_tiny_weights_on(procs: ProcMesh, directory: Path, hf_config: dict, seed: int) -> None:
    """The tiny model's weights into `directory`, written by the first of `procs` (the trainer's,
    which have TorchTitan loaded: models/tiny.py)."""
    writer = procs.spawn("tiny_model_writer", TinyModelWriter)
    await first_actor(writer, procs).write_weights.call_one(str(directory), hf_config, seed)


def first_actor(actors, procs: ProcMesh):
    """The actor of `actors` (spawned on `procs`) on their first proc: the first host's rank 0."""
    return actors.slice(**{label: 0 for label in procs._labels})


async def spawn_generator(
    checkpoint: Checkpoint,
    config: GeneratorConfig,
    weights: WeightsConfig,
    index: int = 0,
    host: HostMesh | None = None,
    log_dir: Path | None = None,
    procs: ProcMesh | None = None,
    lora: LoraConfig | None = None,
    sampling: SamplingConfig | None = None,
) -> tuple[ProcMesh, Any, float]:
    """One Generator (one proc, one vLLM engine) loaded with the checkpoint's weights (and, with
    LoRA, serving them through an adapter that starts at zero); `sampling`: the run's (see Generator).
    Returns its procs, the generator and its engine's start-up in seconds. The vLLM model runner
    its engine runs is said on the console (once for all alike)."""
    check_weights(weights)
    name = f"generator{index}"

    async def start(procs: ProcMesh) -> tuple[Any, EngineStarted]:
        generator = procs.spawn(name, Generator, str(checkpoint.path), config, weights, lora, sampling)
        return generator, await generator.setup.call_one()

    procs, (generator, started) = await _started(procs, lambda: spawn_procs(host, 1, name, log_dir), start)
    if started.runner not in _RUNNERS_SAID:
        _RUNNERS_SAID.add(started.runner)
        print(f"{since_launch()} generator engines: {started.runner}", flush=True)
    return procs, generator, started.seconds


_RUNNERS_SAID: set[str] = set()  # the runner lines this process printed


async def spawn_replay_buffer(
    *,
    max_policy_age: int,
    capacity: int,
    host: HostMesh | None = None,
    log_dir: Path | None = None,
    procs: ProcMesh | None = None,
    drop_zero_variance: bool = False,
    max_zero_variance_drops: int | None = None,
) -> tuple[ProcMesh, Any]:
    """A ReplayBuffer on one proc: episodes older than `max_policy_age` are dropped, at most
    `capacity` held (data/buffer.py)."""
    check_settings(max_policy_age, capacity)
    if procs is None:
        procs = spawn_procs(host, 1, "replay_buffer", log_dir)
    buffer = procs.spawn(
        "replay_buffer",
        ReplayBuffer,
        max_policy_age=max_policy_age,
        capacity=capacity,
        drop_zero_variance=drop_zero_variance,
        max_zero_variance_drops=max_zero_variance_drops,
    )
    return procs, buffer


async def spawn_logprob_model(
    checkpoint: Checkpoint,
    pad_id: int,
    name: str = "scorer",
    threads: int = 1,
    host: HostMesh | None = None,
    log_dir: Path | None = None,
    procs: ProcMesh | None = None,
    temperature: float = 1.0,
    channel_dir: str | None = None,
) -> tuple[ProcMesh, Any]:
    """A LogprobModel (a model scorer: reference policy or teacher) on one proc, loaded;
    `temperature`: the policy's sampling temperature, which its logprobs are taken at;
    `channel_dir`: the trainer's channel, for a teacher that is the policy itself."""

    async def start(procs: ProcMesh) -> Any:
        model = procs.spawn(name, LogprobModel, str(checkpoint.path), pad_id, threads, temperature, channel_dir)
        await model.setup.call_one()
        return model

    return await _started(procs, lambda: spawn_procs(host, 1, name, log_dir), start)


async def spawn_weight_relay(
    channel_dir: str, host: HostMesh, node: int, log_dir: Path | None = None, procs: ProcMesh | None = None
) -> tuple[ProcMesh, Any]:
    """A WeightRelay on `host` (node `node`): the sender or torchstore -> that host's shared-memory channel at `channel_dir`."""
    if procs is None:
        procs = spawn_procs(host, 1, f"weight_relay{node}", log_dir)
    return procs, procs.spawn(f"weight_relay{node}", WeightRelay, channel_dir, node)


async def spawn_weight_sender(
    channel_dir: str, timeout_s: float, host: HostMesh, log_dir: Path | None = None, procs: ProcMesh | None = None
) -> tuple[ProcMesh, Any]:
    """A WeightSender on `host` (the trainer's): its shared-memory channel at `channel_dir` -> the relays."""
    if procs is None:
        procs = spawn_procs(host, 1, "weight_sender", log_dir)
    return procs, procs.spawn("weight_sender", WeightSender, channel_dir, timeout_s)


def spawn_environment_host(
    new_environment,
    name: str = "environment",
    host: HostMesh | None = None,
    log_dir: Path | None = None,
    procs: ProcMesh | None = None,
) -> tuple[ProcMesh, Any]:
    """An EnvironmentHost on one proc, making environments with `new_environment()`."""
    if procs is None:
        procs = spawn_procs(host, 1, name, log_dir)
    return procs, procs.spawn(name, EnvironmentHost, new_environment)


async def stop_all(*meshes: ProcMesh) -> None:
    """Stop each of `meshes`, in turn (a Composition stops what it spawned by itself)."""
    for procs in meshes:
        await procs.stop()
