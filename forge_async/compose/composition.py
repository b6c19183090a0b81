"""Composition: the actor meshes a script spawns itself, from the configs they share, all
released when the script leaves the block.

    async with Composition(log_dir=log_dir) as meshes:
        trainer = await meshes.spawn_trainer(learner)
        generator = await meshes.spawn_generator(checkpoint, GeneratorConfig())
        buffer = await meshes.spawn_replay_buffer(max_policy_age=0, capacity=1024)

What it resolves: one weights config for all its meshes, whose channel directory (the run's
scratch on this host: weights/scratch.py) is `weights.channel_dir`, or a fresh
`forge_async-<id>` under /dev/shm where that is null; this process is recorded as its owner, so
that a script killed outright leaves it for the next run or composition to remove. With the
torchstore transport it starts the store.

What it refuses, in one line before any proc starts: the settings handles/meshes.py checks
(ConfigError, a UserError). A UserError an actor raises as it starts is raised as itself, not
as a remote traceback, and a failed proc is reported where its calls fail (Monarch's default
would end the script).

What it releases when the block ends, however it ends (an error, or Ctrl-C: asyncio.run cancels
the block's task): every proc it spawned, the store it started, and the channel directory.
"""

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import monarch.actor
from monarch.actor import ActorError, HostMesh, ProcMesh

from forge_async.errors import ConfigError, UserError
from forge_async.generation.config import GeneratorConfig, SamplingConfig
from forge_async.handles import meshes
from forge_async.learning.spec import LearnerSpec
from forge_async.mesh.procs import keep_controller_alive_on_faults
from forge_async.mesh.supervision import stop_quietly
from forge_async.models.config import LoraConfig
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.weights import scratch
from forge_async.weights.config import WeightsConfig


class Composition:
    """An async context manager: `async with Composition(weights, log_dir) as meshes`.

    `weights`: how every mesh of it moves weights (default `WeightsConfig()`: shared memory on
    this host); `log_dir`: where each mesh's procs write their output (LOG_DIR/<mesh>.log; None:
    the console). Each `spawn_*` returns the actor mesh, ready; `engine_start_s` holds each
    generator's engine start-up, in seconds."""

    def __init__(self, weights: WeightsConfig | None = None, log_dir: str | Path | None = None):
        self.weights = (weights or WeightsConfig()).resolved()
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.engine_start_s: list[float] = []
        self._procs: list[ProcMesh] = []
        self._generators = 0
        self._store_started = False
        self._fault_hook: Any = None
        self._open = False

    @property
    def channel_dir(self) -> Path:
        """This composition's scratch directory on this host: the shared-memory weight channel,
        the engines' temporary files."""
        assert self.weights.channel_dir is not None  # resolved in __init__
        return Path(self.weights.channel_dir)

    async def __aenter__(self) -> "Composition":
        if self._open:
            raise RuntimeError("a Composition is entered once")
        scratch.name_this_process_owner()
        for stale in scratch.reclaim(self.channel_dir.parent):
            print(f"removed {stale}: its run ended without removing it", flush=True)
        scratch.claim(self.channel_dir)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self._fault_hook = monarch.actor.unhandled_fault_hook
        keep_controller_alive_on_faults()
        self._open = True
        if self.weights.transport == "torchstore":
            from forge_async.weights import store  # heavy to import: only where torchstore is used

            await store.start_store()
            self._store_started = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop every proc (all at once, each given mesh/supervision.py's STOP_TIMEOUT_S), then the
        store; the channel directory is removed whatever of that fails."""
        try:
            await asyncio.gather(*(stop_quietly(procs) for procs in self._procs))
            if self._store_started:
                from forge_async.weights import store

                await store.stop_store()
        finally:
            self._procs.clear()
            scratch.remove(self.channel_dir)
            scratch.reclaim(self.channel_dir.parent)
            monarch.actor.unhandled_fault_hook = self._fault_hook
            self._open = False

    async def spawn_trainer(self, spec: LearnerSpec, hosts: HostMesh | None = None) -> Any:
        """A Trainer mesh: `spec.config.procs` ranks (FSDP2) per host of `hosts` (default: this
        host), torch.distributed up, `spec`'s checkpoint loaded; it publishes each version over
        this composition's weights."""
        with self._spawning():
            procs, trainer = await meshes.spawn_trainer(spec, self.weights, hosts, self.log_dir)
        self._procs.append(procs)
        return trainer

    async def spawn_generator(
        self,
        checkpoint: Checkpoint,
        config: GeneratorConfig | None = None,
        *,
        lora: LoraConfig | None = None,
        sampling: SamplingConfig | None = None,
        host: HostMesh | None = None,
    ) -> Any:
        """A Generator (one proc, one vLLM engine: `config`, default `GeneratorConfig()`) loaded with
        `checkpoint`, taking new versions over this composition's weights; `lora`: the trainer's
        LoraConfig, for a LoRA run; `sampling`: what the engine reports (see Generator). Each
        generator is named in turn: generator0, generator1, ..."""
        index = self._generators
        with self._spawning():
            procs, generator, engine_start_s = await meshes.spawn_generator(
                checkpoint,
                config or GeneratorConfig(),
                self.weights,
                index,
                host,
                self.log_dir,
                lora=lora,
                sampling=sampling,
            )
        self._procs.append(procs)
        self._generators += 1
        self.engine_start_s.append(engine_start_s)
        return generator

    async def spawn_replay_buffer(
        self,
        *,
        max_policy_age: int,
        capacity: int,
        drop_zero_variance: bool = False,
        max_zero_variance_drops: int | None = None,
        host: HostMesh | None = None,
    ) -> Any:
        """A ReplayBuffer on one proc: episodes older than `max_policy_age` versions are dropped
        (counted as stale), at most `capacity` held; `drop_zero_variance`: groups whose rewards
        are all equal are dropped as they arrive, up to `max_zero_variance_drops` between two
        sampled batches (None: any)."""
        with self._spawning():
            procs, buffer = await meshes.spawn_replay_buffer(
                max_policy_age=max_policy_age,
                capacity=capacity,
                host=host,
                log_dir=self.log_dir,
                drop_zero_variance=drop_zero_variance,
                max_zero_variance_drops=max_zero_variance_drops,
            )
        self._procs.append(procs)
        return buffer

    async def spawn_logprob_model(
        self,
        checkpoint: Checkpoint,
        pad_id: int,
        *,
        name: str = "scorer",
        threads: int = 1,
        temperature: float = 1.0,
        follows_policy: bool = False,
        host: HostMesh | None = None,
    ) -> Any:
        """A LogprobModel (a reference policy or a teacher) of `checkpoint` on one proc: `score`
        gives per-token logprobs at `temperature` (the policy's sampling temperature);
        `follows_policy`: it loads each version the trainer publishes (a teacher that is the
        policy itself; the shm transport)."""
        if follows_policy and self.weights.transport != "shm":
            raise ConfigError(
                f"spawn_logprob_model(follows_policy=True) reads the trainer's shared-memory channel: "
                f"weights.transport is {self.weights.transport!r}, not 'shm'"
            )
        channel_dir = self.weights.channel_dir if follows_policy else None
        with self._spawning():
            procs, model = await meshes.spawn_logprob_model(
                checkpoint,
                pad_id,
                name,
                threads,
                host,
                self.log_dir,
                temperature=temperature,
                channel_dir=channel_dir,
            )
        self._procs.append(procs)
        return model

    @contextmanager
    def _spawning(self) -> Iterator[None]:
        """Spawn within the block only; a UserError an actor raised as it started, as itself."""
        if not self._open:
            raise RuntimeError("spawn inside `async with Composition(...) as meshes:` (it stops what it spawned)")
        try:
            yield
        except ActorError as err:
            if isinstance(err.exception, UserError):
                raise err.exception from None
            raise
