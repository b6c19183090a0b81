"""The run's procs: where each role runs, and the first set spawned before anything heavy.

A proc spends most of its start-up importing vLLM or TorchTitan
(benchmarks/pipeline/startup.py times the phases). Spawned first thing, with those imports in the proc's bootstrap, the
procs import while the controller imports its own (torch, TorchTitan,
transformers) and builds the tiny checkpoint; the actors spawned on them later
find their modules loaded. This module therefore imports nothing heavy itself.

Roles: mesh/roles.py.
"""

import asyncio
import os
import socket
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import monarch.actor
from monarch.actor import HostMesh, MeshFailure, ProcMesh, this_host

from forge_async.generation.platform import prepare_process
from forge_async.observability.console import send_output_to_log
from forge_async.errors import ConfigError
from forge_async.process.heap_trim import start_heap_trimmer
from forge_async.cluster.hosts import Hosts
from forge_async.process.imports import frozen, import_frozen
from forge_async.mesh.roles import REPLAY_BUFFER, TRAINER, Kind, Role, environment, generator, scorer
from forge_async.mesh.run_plan import RunPlan
from forge_async.observability.span_names import LAUNCH, START_UP_IMPORTS, START_UP_LANE
from forge_async.observability.spans import TRACER
from forge_async.process.started import process_started_ns

# What each kind of role's actor imports.
# The actor modules leave TorchTitan, DCP, and the trainer's learner and publisher (FSDP2,
# DTensor) to the procs (the controller imports the actor modules to spawn).
PRELOAD = {
    Kind.TRAINER: (
        "forge_async.actors.trainer",
        "forge_async.learning.learner",
        "forge_async.weights.publisher",
        "forge_async.models.titan",
        "torchtitan.components.optimizer.lr_scheduler",
        "torch.distributed.checkpoint",
    ),
    Kind.GENERATOR: ("forge_async.actors.generator", "vllm.entrypoints.llm"),
    Kind.REPLAY_BUFFER: ("forge_async.actors.replay_buffer",),
    Kind.WEIGHT_RELAY: ("forge_async.actors.weight_relay", "forge_async.weights.store"),
    Kind.WEIGHT_SENDER: ("forge_async.actors.weight_sender",),
    Kind.SCORER: ("forge_async.actors.logprob_model", "forge_async.models.titan"),
    Kind.ENVIRONMENT: ("forge_async.actors.environment_host",),
}
PRELOAD[Kind.RIVAL_TRAINER] = PRELOAD[Kind.TRAINER]
_TRAINERS = (Kind.TRAINER, Kind.RIVAL_TRAINER)  # a rival's trainer is placed as the trainer is


Step = Callable[[], object]  # what a proc does before its imports


def start_proc(
    log_dir: str | None, name: str, modules: tuple[str, ...], trace: bool = True, prepare: tuple[Step, ...] = ()
) -> None:
    """A proc's bootstrap: its heap trimmed every half minute (process/heap_trim.py), its output to
    LOG_DIR/NAME.log (none: the console), spans recorded or not (`trace`), the `prepare`
    steps (environment that must be set before torch or vLLM read it), then `modules` imported.
    The spawn and the imports are recorded as start-up spans."""
    TRACER.enabled = trace
    TRACER.add(LAUNCH, process_started_ns(), time.time_ns(), START_UP_LANE)
    start_heap_trimmer()
    if log_dir is not None:
        send_output_to_log(log_dir, name)
    with TRACER.span(START_UP_IMPORTS, START_UP_LANE), frozen():  # the steps import torch: as the modules, no collector
        for step in prepare:
            step()
        import_frozen(*modules)


def import_at_niceness(nice: int) -> None:
    """A `prepare` step: the bootstrap's thread, which runs the imports, at niceness `nice`.

    Linux keeps a niceness per thread: the threads Monarch runs the actor on were started
    before the bootstrap and keep theirs, so the proc's work after start-up is not affected.
    benchmarks/pipeline/startup.py measures the effect on the first step.
    """
    os.nice(nice)


def sleep_between_copies() -> None:
    """A `prepare` step for the weight sender and relays: OpenMP threads sleep as soon as a
    parallel region ends (OMP_WAIT_POLICY=PASSIVE, read when torch loads OpenMP) rather than spin
    for milliseconds. Their only parallel work is one copy of a version now and then, and on a
    host with idle cores the spin after each costs more CPU than the copy (the sender's and
    the relays' CPU a step: benchmarks/cluster/cross_host_pipeline.py). A user's own setting
    is kept."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def use_gpus(indices: str, key: str) -> None:
    """A `prepare` step: show this proc only the GPUs `indices` ("0,1") of its node, through
    CUDA_VISIBLE_DEVICES (read when CUDA initialises). Where the node's environment sets it
    already (Slurm does), an index is a position in that list. Fails naming `key` if the node
    does not have them all."""
    wanted = [int(i) for i in indices.split(",")]
    node = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = None if node is None else [gpu for gpu in node.split(",") if gpu]
    visible = indices if listed is None else ",".join(listed[i] for i in wanted if i < len(listed))
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    import torch

    if torch.cuda.device_count() < len(wanted):
        shown = "" if listed is None else f" of CUDA_VISIBLE_DEVICES={node}"
        raise ConfigError(
            f"{key}: GPU(s) {indices}{shown} not all found on {socket.gethostname()} "
            f"({torch.cuda.device_count()} of {len(wanted)} visible)"
        )


def spawn_procs(
    host: HostMesh | None,
    procs: int,
    name: str,
    log_dir: Path | None,
    preload: tuple[str, ...] = (),
    trace: bool = True,
    prepare: tuple[Step, ...] = (),
) -> ProcMesh:
    """`procs` procs per host of `host` (default: this host), started by `start_proc`; returns at once."""
    bootstrap = partial(start_proc, None if log_dir is None else str(log_dir), name, preload, trace, prepare)
    return (host or this_host()).spawn_procs(per_host={"procs": procs}, bootstrap=bootstrap, name=name)


def keep_controller_alive_on_faults() -> None:
    """Monarch's default reaction to an unhandled proc failure ends the controller;
    here failures are handled where the calls fail (mesh/supervision.py), so only note them."""
    monarch.actor.unhandled_fault_hook = _note_fault


def _note_fault(failure: MeshFailure) -> None:
    print(f"proc failure reported by Monarch: {failure.mesh_name}", file=sys.stderr, flush=True)


def shut_down_monarch(timeout_s: float = 60.0) -> None:
    """End this process's Monarch context: its host mesh stops the procs still running, each
    given 10 s before SIGTERM. A shutdown that outlasts `timeout_s` (a proc that ignores its
    stop) is noted on stderr and not waited for: whatever the process wrote is written by then."""
    try:
        monarch.actor.shutdown_context().get(timeout=timeout_s)
    except TimeoutError:
        print(
            f"warning: Monarch's shutdown did not finish within {timeout_s:g} s; not waiting for it",
            file=sys.stderr,
            flush=True,
        )


class RunProcs:
    """Each role's proc mesh: the first ones spawned together by `spawn_all`, new ones on demand."""

    def __init__(self, plan: RunPlan, hosts: Hosts, log_dir: Path | None):
        """`plan`: what the run brings up and where (mesh/run_plan.py)."""
        self.plan = plan
        self.hosts = hosts
        self.log_dir = log_dir
        self._early: dict[Role, ProcMesh] = {}

    def host(self, role: Role) -> HostMesh | None:
        """The node(s) `role` runs on; None for a trainer on this host alone."""
        placement = self.plan.placement
        if role.kind in _TRAINERS:
            nodes = placement.trainer_hosts
            return self.hosts.nodes(min(nodes), max(nodes)) if self.hosts.nnodes > 1 else None
        if role.kind is Kind.GENERATOR:
            return self.hosts.node(placement.generator_host(role.number))
        if role.kind is Kind.WEIGHT_RELAY:
            return self.hosts.node(role.number)
        if role.kind is Kind.WEIGHT_SENDER:
            return self.hosts.node(placement.trainer_hosts[0])
        return self.hosts.node(0)  # the replay buffer, model scorers and environments, beside the controller

    def spawn(self, role: Role) -> ProcMesh:
        """New procs for `role`, importing what its actor needs as they start."""
        procs = self.plan.trainer.procs if role.kind in _TRAINERS else 1
        return spawn_procs(
            self.host(role),
            procs,
            str(role),
            self.log_dir,
            PRELOAD[role.kind],
            self.plan.trace,
            self.prepare(role),
        )

    def prepare(self, role: Role) -> tuple[Step, ...]:
        """What `role`'s procs do before their imports: take their GPUs (placement.*_gpus);
        a generator also decides how vLLM runs there (generation/platform.py); the others
        import at a lower priority (placement.import_nice), first, so that where they share cores
        with a generator its import, the critical path of start-up, runs first; the weight
        sender and relays keep OpenMP from spinning."""
        steps: list[Step] = []
        nice = self.plan.placement.import_nice
        if nice and role.kind is not Kind.GENERATOR:
            steps.append(partial(import_at_niceness, nice))
        gpus, key = self.plan.placement.visible_gpus(role), f"placement.{role.kind.value}_gpus"
        if role.kind is Kind.SCORER:
            gpu, key = self.plan.scorers[role.number].gpu, f"scorers[{role.index}].gpu"
            gpus = None if gpu is None else str(gpu)
        if gpus is not None:
            steps.append(partial(use_gpus, gpus, key))
        if role.kind is Kind.GENERATOR:
            steps.append(partial(prepare_process, self.plan.generator))
        if role.kind in (Kind.WEIGHT_SENDER, Kind.WEIGHT_RELAY):
            steps.append(sleep_between_copies)
        return tuple(steps)

    def spawn_all(self) -> None:
        """Trainer, generators, replay buffer, model scorers and environment procs, all at once (weight relays are
        spawned when needed)."""
        early = [
            TRAINER,
            *([REPLAY_BUFFER] if self.plan.replay_buffer else []),
            *(generator(i) for i in range(self.plan.generator.count)),
            *map(scorer, self.plan.model_scorers),
            *(environment(i) for i in range(self.plan.environment_procs)),
        ]
        self._early = {role: self.spawn(role) for role in early}

    def early(self, role: Role) -> ProcMesh:
        """`role`'s early procs, left for `take` (spawned now if there are none)."""
        if role not in self._early:
            self._early[role] = self.spawn(role)
        return self._early[role]

    def take(self, role: Role) -> ProcMesh:
        """`role`'s early procs the first time; new ones after (a respawn)."""
        early = self._early.pop(role, None)
        return early if early is not None else self.spawn(role)

    async def stop_unused(self, timeout_s: float = 1) -> None:
        """Stop early procs no actor was spawned on (start-up failed before it got to them).

        A stop waits for the proc's bootstrap (its imports, seconds); these procs hold
        nothing, so after `timeout_s` they are left to end with the controller."""
        unused, self._early = list(self._early.values()), {}
        if unused:
            await asyncio.wait([asyncio.ensure_future(procs.stop()) for procs in unused], timeout=timeout_s)
