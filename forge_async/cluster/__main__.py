"""Launch an app across nodes, torchrun-style: the same command on every node.

    python -m forge_async.cluster --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -- apps.grpo placement.generator_hosts=[1]
    python -m forge_async.cluster --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- apps.grpo placement.generator_hosts=[1]
    srun python -m forge_async.cluster -- apps.grpo ...       # flags from Slurm's environment

Node 0 waits for the others to join (forge_async/cluster/rendezvous.py), then runs the app
(the controller) in this process; the app spawns meshes on the other nodes'
Monarch workers. Nodes 1..N-1 serve a Monarch worker until node 0 says the run
is over, or stops answering; then they stop their worker and every proc it ran.
"""

import os

# torch.distributed's C++ warnings (a peer's host name it cannot look up, a store peer that
# closed its socket at the end of a run) are noise here; errors still raise.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import argparse  # noqa: E402
import runpy
import signal
import subprocess
import sys
import time

from forge_async.errors import ConfigError
from forge_async.process.exit import defer_to_caller, exit_now
from forge_async.cluster.hosts import NODE_ADDR_ENV, NODE_RANK_ENV, RENDEZVOUS_ENV, WORKERS_ENV, free_port
from forge_async.cluster.nodes import NodeSpec
from forge_async.cluster.rendezvous import Rendezvous, own_address
from forge_async.weights import scratch
from forge_async.weights.config import default_root

_WATCH_S = 0.5


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The launcher's flags (before `--`) and the app's command line (after it)."""
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        prog="python -m forge_async.cluster",
        usage="%(prog)s [flags] -- APP_MODULE [overrides ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each flag may come from torchrun's or Slurm's environment instead (docs/launch.md).",
    )
    parser.add_argument("--nnodes", type=int, help="nodes in the job (env NNODES, SLURM_NNODES; default 1)")
    parser.add_argument("--node-rank", type=int, help="this node's rank, 0 runs the app (env NODE_RANK, SLURM_NODEID)")
    parser.add_argument("--master-addr", help="node 0's address on the nodes' network (env MASTER_ADDR)")
    parser.add_argument("--master-port", type=int, help="node 0's rendezvous port (env MASTER_PORT; default 29500)")
    parser.add_argument("--join-timeout", type=float, help="seconds node 0 waits for the others (default 120)")
    args = parser.parse_args(argv[:split])
    app = argv[split + 1 :]
    if not app:
        parser.error("name the app module after --, e.g. -- apps.grpo")
    return args, app


def start_worker(node: NodeSpec, rendezvous: Rendezvous) -> subprocess.Popen:
    """This node's Monarch worker, registered with node 0; procs it spawns know their node."""
    address = own_address(node.master_addr) if node.node_rank else node.master_addr
    worker_address = f"tcp://{address}:{free_port(address)}"
    # This process owns the run's scratch directory on this node (weights/scratch.py).
    env = {
        **os.environ,
        NODE_RANK_ENV: str(node.node_rank),
        NODE_ADDR_ENV: address,
        scratch.OWNER_ENV: str(os.getpid()),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "forge_async.cluster.worker", worker_address], env=env, start_new_session=True
    )
    signal.signal(signal.SIGTERM, lambda *_: _stop(worker, 143))
    rendezvous.register(worker_address)
    print(f"node {node.node_rank}: Monarch worker at {worker_address}", flush=True)
    return worker


def run_controller(node: NodeSpec, app: list[str]) -> None:
    """Node 0: run the app here; with several nodes, once every node's worker has joined."""
    os.environ[NODE_RANK_ENV] = "0"
    if node.nnodes == 1:
        return _run_app(app)
    rendezvous = Rendezvous(node)
    worker = start_worker(node, rendezvous)
    try:
        print(
            f"node 0: waiting for {node.nnodes - 1} more node(s) at {node.master_addr}:{node.master_port} ...",
            flush=True,
        )
        os.environ[WORKERS_ENV] = ",".join(rendezvous.wait_for_workers())
        os.environ[RENDEZVOUS_ENV] = f"{node.master_addr}:{node.master_port}"  # nodes that come back register there
        os.environ[NODE_ADDR_ENV] = node.master_addr
        _run_app(app)
    finally:
        rendezvous.release_workers()
        _stop(worker, None)


def _run_app(app: list[str]) -> None:
    sys.argv = [app[0], *app[1:]]
    runpy.run_module(app[0], run_name="__main__", alter_sys=True)


def serve_worker(node: NodeSpec) -> int:
    """Node r > 0: serve a Monarch worker until node 0 is done (or gone); leave nothing behind."""
    for stale in scratch.reclaim(default_root()):
        print(f"node {node.node_rank}: removed {stale}: its run ended without removing it", flush=True)
    rendezvous = Rendezvous(node)
    worker = start_worker(node, rendezvous)
    try:
        while worker.poll() is None and not rendezvous.should_stop():
            time.sleep(_WATCH_S)
        if worker.poll() is not None:
            print(f"node {node.node_rank}: the Monarch worker exited ({worker.returncode})", file=sys.stderr)
            return 1
        print(f"node {node.node_rank}: the run is over; stopping", flush=True)
        return 0
    finally:
        _stop(worker, None)
        scratch.reclaim(default_root(), owned_by=scratch.Owner.of(os.getpid()))


def _stop(worker: subprocess.Popen, exit_status: int | None) -> None:
    """Kill the worker (if still running) and every proc it spawned (they are its descendants)."""
    if worker.returncode is None:
        for pid in [*_descendants(worker.pid), worker.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.wait()
    if exit_status is not None:
        sys.exit(exit_status)


def _descendants(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children = [int(c) for c in f.read().split()]
            for child in children:
                found += [child, *_descendants(child)]
    except FileNotFoundError:
        pass
    return found


def main() -> None:
    args, app = parse_args(sys.argv[1:])
    defer_to_caller()  # the app's exit leaves this node's worker to be stopped below
    try:
        node = NodeSpec.resolve(
            args.nnodes, args.node_rank, args.master_addr, args.master_port, args.join_timeout, os.environ
        )
        if node.node_rank == 0:
            run_controller(node, app)
        else:
            sys.exit(serve_worker(node))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as done:
        exit_now(done.code)
