"""Weights across hosts vs on one host, against one memcpy, in one run (simulated hosts; root).

Two simulated hosts (network namespaces, each with its own /dev/shm; see
forge_async/launch/netns.py), launched with `python -m forge_async.launch` like a
real 2-node job. For state dicts of 10M and 100M fp32 parameters, per version:

- same host:  writer -> node 0's shared-memory channel -> a reader on node 0 (the
              path a generator beside the trainer takes);
- cross host: writer -> torchstore (put) -> node 1's WeightRelay (get, write into
              node 1's channel) -> a reader on node 1 (the path of every generator
              on another node; one network copy per node);
- memcpy:     one copy of the same bytes in one process.

    sudo .venv/bin/python -m benchmarks.cross_host_transfer [--sizes 10 100] [--repeats 3]
"""

import argparse
import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def drive(argv: list[str]) -> int:
    """Make two simulated hosts and run this benchmark on them through the launcher."""
    from forge_async.launch.netns import available, launch_command, simulated_hosts

    if available() is not None:
        sys.exit(f"cannot simulate hosts here: {available()}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # remote procs import this module
    with simulated_hosts(2) as cluster:
        app = ["benchmarks.cross_host_transfer", *argv]
        node1 = cluster.start(1, launch_command(2, 1, *app), env=env, stdout=subprocess.DEVNULL)
        node0 = cluster.start(0, launch_command(2, 0, *app), env=env)
        code = node0.wait()
        node1.wait(timeout=30)
    return code


async def measure(hosts, millions: int, repeats: int) -> dict[str, float]:
    from benchmarks.weight_transfer import Endpoint, memcpy_s
    from forge_async.launch.meshes import spawn_weight_relay
    from forge_async.weights.config import default_root
    from forge_async.weights.shared_memory import SharedMemoryChannel

    channel_dir = str(default_root() / f"forge_async-bench-{uuid.uuid4().hex[:8]}")  # same path, each node's /dev/shm
    node0 = hosts.node(0).spawn_procs(per_host={"procs": 2})
    node1 = hosts.node(1).spawn_procs(per_host={"procs": 1})
    writer = node0.slice(procs=0).spawn("writer", Endpoint, millions, channel_dir)
    local_reader = node0.slice(procs=1).spawn("local_reader", Endpoint, millions, channel_dir)
    remote_reader = node1.spawn("remote_reader", Endpoint, millions, channel_dir)
    relay_procs, relay = await spawn_weight_relay(channel_dir, hosts.node(1), 1)
    same, cross = [], []
    try:
        for v in range(1, repeats + 3):  # the first two versions fill the two slots
            same.append(await writer.write_shm.call_one(v) + await local_reader.read_shm.call_one())
            put = await writer.put_torchstore.call_one(v)
            relayed = await relay.load_version.call_one(v)
            read = await remote_reader.read_shm.call_one()
            cross.append(put + (relayed["fetch_ms"] + relayed["load_ms"]) / 1e3 + read)
        assert await remote_reader.checksum.call_one() == await writer.checksum.call_one()
    finally:
        await relay.remove_channel.call_one()  # node 1's copy; node 0's is this process's /dev/shm
        SharedMemoryChannel(channel_dir).remove()
        for procs in (node0, node1, relay_procs):
            await procs.stop()
    return {"same": min(same[2:]), "cross": min(cross[2:]), "memcpy": memcpy_s(millions, repeats + 2)}


async def run(sizes: list[int], repeats: int) -> None:
    from forge_async.launch.hosts import Hosts
    from forge_async.weights import store

    hosts = Hosts.from_env()
    await hosts.start()
    await store.start_store()
    print(f"{'params':>8} {'memcpy':>10} {'same host':>10} {'ratio':>7} {'cross host':>11} {'ratio':>7}", flush=True)
    try:
        for millions in sizes:
            f = await measure(hosts, millions, repeats)
            print(
                f"{millions:>7}M {f['memcpy'] * 1e3:>8.1f}ms {f['same'] * 1e3:>8.1f}ms {f['same'] / f['memcpy']:>6.1f}x "
                f"{f['cross'] * 1e3:>9.1f}ms {f['cross'] / f['memcpy']:>6.1f}x",
                flush=True,
            )
    finally:
        await store.stop_store()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100], help="millions of params")
    parser.add_argument("--repeats", type=int, default=3, help="best of N")
    args = parser.parse_args()
    if "FORGE_ASYNC_WORKERS" not in os.environ:
        sys.exit(drive(sys.argv[1:]))
    import forge_async  # noqa: F401

    asyncio.run(run(args.sizes, args.repeats))
    from monarch.actor import shutdown_context

    shutdown_context().get(timeout=30)
