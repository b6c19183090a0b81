"""A run's start: its procs spawned first thing, before the controller imports anything heavy.

The procs start importing vLLM and TorchTitan at once; the app then imports its training half
(controller/grpo_run.py, controller/sft_run.py), which needs torch, while they do.
"""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from forge_async.cluster.torchrun import leave_torchrun_job
from forge_async.controller.config import RunConfig
from forge_async.cluster.hosts import Hosts
from forge_async.mesh.procs import RunProcs, keep_controller_alive_on_faults
from forge_async.observability.console import since_launch
from forge_async.observability.span_names import LAUNCH, START_UP_LANE
from forge_async.observability.spans import TRACER
from forge_async.process.heap_trim import start_heap_trimmer
from forge_async.process.started import process_started_ns
from forge_async.weights import scratch


@asynccontextmanager
async def spawned_procs(config: RunConfig, run_dir: Path) -> AsyncIterator[RunProcs]:
    """The run's procs, spawned first thing (every app's start), as its plan says (`config.plan()`,
    once the weights' channel is resolved); those no actor took are stopped when the block ends."""
    begun = time.time_ns()
    print(f"run dir: {run_dir}", flush=True)
    config.check_paths()
    if leave_torchrun_job():
        print("started by torchrun: running as its one process; its job's variables stay out of the procs", flush=True)
    hosts = Hosts.from_env()
    config.placement.check(hosts.nnodes)
    config.weights = config.weights.resolved()
    keep_controller_alive_on_faults()
    start_heap_trimmer()
    TRACER.enabled = config.trace.enabled
    TRACER.add(LAUNCH, process_started_ns(), begun, START_UP_LANE)
    scratch_dir = claim_scratch(Path(config.weights.chosen_dir))
    await hosts.start()
    procs = RunProcs(config.plan(), hosts, None if config.verbose else run_dir / "logs")
    procs.spawn_all()
    print(f"{since_launch()} spawning {procs.plan.meshes()} ...", flush=True)
    try:
        yield procs
    finally:
        await procs.stop_unused()
        scratch.remove(scratch_dir)
        scratch.reclaim(scratch_dir.parent)


def claim_scratch(directory: Path) -> Path:
    """This host's scratch directory of the run (weights/scratch.py), owned by this process,
    after removing those of runs on this host that died without removing theirs."""
    scratch.name_this_process_owner()
    for stale in scratch.reclaim(directory.parent):
        print(f"removed {stale}: its run ended without removing it", flush=True)
    return scratch.claim(directory)
