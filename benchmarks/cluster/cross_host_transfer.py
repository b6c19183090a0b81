"""Weights across hosts against the link's own floor, at shaped link rates, in one run
(simulated hosts; root).

Two simulated hosts (network namespaces, each with its own /dev/shm; see
forge_async/cluster/netns.py), launched with `python -m forge_async.cluster` like a
real 2-node job. For each link rate (`--rates`: the unshaped veth, and rates that
`tc` shapes node 0's egress to with a token bucket) and each state dict (the tiny
default model's tensors, and `--sizes` millions of fp32 parameters):

- floor:  bytes/s of a plain TCP copy (Python sockets, 4 MiB writes) of the version's
          bytes (64 MiB at least) from node 0 to node 1, just before, on the same link;
- gloo:   the run's path (`weights.cross_host=gloo`): a writer (as the trainer)
          publishes into node 0's shared-memory channel, the WeightSender hears
          it on the channel's doorbell, stages the version and sends it over its
          gloo pair, and node 1's WeightRelay receives it whole, writes it into
          node 1's channel and says so. Timed from the controller: the call to
          the writer and the sender's report, less the write itself;
- ratio:  gloo / (bytes / floor): 1.0 = the link's line rate;
- torchstore (`--torchstore`, unshaped only): put, then the relay's get (the other
          cross-host path).

Median of `--repeats` steady-state versions (two warm-up versions fill the slots).

    sudo .venv/bin/python -m benchmarks.cluster.cross_host_transfer [--rates unshaped 10gbit 1gbit] [--sizes 100] [--json PATH]
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from monarch.actor import Channel, endpoint

from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.mesh.located import LocatedActor
from forge_async.cluster.hosts import free_port, interface_of, node_address

REPO = Path(__file__).resolve().parents[2]
_TCP_CHUNK = 4 << 20
_FLOOR_BYTES = 64 << 20  # at least: shorter copies ride the token bucket's burst
_UNITS = {"gbit": 1e9, "mbit": 1e6}


def drive(argv: list[str]) -> int:
    """Make two simulated hosts and run this benchmark on them through the launcher."""
    from forge_async.cluster.netns import available, launch_command, simulated_hosts

    if available() is not None:
        sys.exit(f"cannot simulate hosts here: {available()}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # remote procs import this module
    with simulated_hosts(2) as cluster:
        app = ["benchmarks.cluster.cross_host_transfer", *argv]
        node1 = cluster.start(1, launch_command(2, 1, *app), env=env, stdout=subprocess.DEVNULL)
        node0 = cluster.start(0, launch_command(2, 0, *app), env=env)
        code = node0.wait()
        node1.wait(timeout=30)
    return code


def shape_link(rate: str) -> None:
    """Shape this node's egress to `rate` ("unshaped": remove any shaping)."""
    device = interface_of(node_address())
    subprocess.run(["tc", "qdisc", "del", "dev", device, "root"], capture_output=True)
    if rate != "unshaped":
        bits = float(rate[:-4]) * _UNITS[rate[-4:]]
        burst = max(1 << 20, int(bits / 8 / 100))  # 10 ms of the rate: enough for the timer's granularity
        subprocess.run(
            ["tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms"],
            check=True,
            capture_output=True,
        )


class LinkProbe(LocatedActor):
    """A plain TCP copy: `listen` on the receiving node, `send` on the other."""

    @endpoint
    async def listen(self, nbytes: int) -> tuple[str, int]:
        address = node_address()
        server = socket.create_server((address, free_port(address)))
        self.result: dict = {}
        self.thread = threading.Thread(target=self._drain, args=(server, nbytes), daemon=True)
        self.thread.start()
        return server.getsockname()[:2]

    def _drain(self, server: socket.socket, nbytes: int) -> None:
        connection, _ = server.accept()
        buffer, left = bytearray(_TCP_CHUNK), nbytes
        start = time.perf_counter()
        while left:
            got = connection.recv_into(buffer, min(left, _TCP_CHUNK))
            if not got:
                break
            left -= got
        self.result["s"] = time.perf_counter() - start
        connection.close()
        server.close()

    @endpoint
    async def received_s(self) -> float:
        await asyncio.to_thread(self.thread.join)
        return self.result["s"]

    @endpoint
    async def send(self, address: tuple[str, int], nbytes: int) -> None:
        payload = memoryview(bytearray(_TCP_CHUNK))
        with socket.create_connection(address) as connection:
            for start in range(0, nbytes, _TCP_CHUNK):
                connection.sendall(payload[: min(_TCP_CHUNK, nbytes - start)])


async def link_floor(source, sink, nbytes: int) -> float:
    """Bytes/s of one TCP copy of `nbytes` from `source`'s node to `sink`'s."""
    address = await sink.listen.call_one(nbytes)
    await source.send.call_one(address, nbytes)
    return nbytes / await sink.received_s.call_one()


async def measure(hosts, shapes, rates: list[str], repeats: int, torchstore: bool) -> list[dict]:
    from benchmarks.harness.weight_endpoint import Endpoint, nbytes
    from forge_async.handles.meshes import spawn_weight_relay, spawn_weight_sender
    from forge_async.weights.config import default_root
    from forge_async.weights.outcomes import Sent
    from forge_async.weights.shared_memory import SharedMemoryChannel

    channel_dir = str(default_root() / f"forge_async-bench-{uuid.uuid4().hex[:8]}")  # same path, each node's /dev/shm
    node0 = hosts.node(0).spawn_procs(per_host={"procs": 1})
    node1 = hosts.node(1).spawn_procs(per_host={"procs": 1})
    writer = node0.spawn("writer", Endpoint, shapes, channel_dir)
    source, sink = node0.spawn("source", LinkProbe), node1.spawn("sink", LinkProbe)
    remote_reader = node1.spawn("remote_reader", Endpoint, shapes, channel_dir)
    sender_procs, sender = await spawn_weight_sender(channel_dir, 60.0, hosts.node(0))
    relay_procs, relay = await spawn_weight_relay(channel_dir, hosts.node(1), 1)
    await relay.join.call_one(await sender.rendezvous.call_one(), 60.0)
    reports, arrivals = Channel.open()
    await asyncio.gather(sender.open_pair.call_one(1, 1, reports), relay.open_pair.call_one(1))
    size, rows, version = nbytes(shapes), [], 0
    try:
        for rate in rates:
            shape_link(rate)
            floor = await link_floor(source, sink, max(size, _FLOOR_BYTES))
            times = []
            for _ in range(repeats + 2):
                version += 1
                start = time.perf_counter()
                written_s, (_, _, sent) = await asyncio.gather(writer.write_shm.call_one(version), arrivals.recv())
                times.append(time.perf_counter() - start - written_s)  # the report comes once node 1 has it
                assert isinstance(sent, Sent) and sent.version == version, sent
            row = {"rate": rate, "bytes": size, "floor": floor, "gloo": statistics.median(times[2:])}
            if torchstore and rate == "unshaped":
                row["torchstore"] = await torchstore_s(writer, relay, version + 1, repeats)
                version += repeats + 2
            rows.append(row)
        await remote_reader.read_shm.call_one()
        assert await remote_reader.checksum.call_one() == await writer.checksum.call_one()  # the bytes arrived
    finally:
        shape_link("unshaped")
        await relay.remove_channel.call_one()  # node 1's copy; node 0's is this process's /dev/shm
        SharedMemoryChannel(channel_dir).remove()
        for procs in (node0, node1, sender_procs, relay_procs):
            await procs.stop()
    return rows


async def torchstore_s(writer, relay, first: int, repeats: int) -> float:
    times = []
    for version in range(first, first + repeats + 2):
        start = time.perf_counter()
        await writer.put_torchstore.call_one(version)
        await relay.load_version.call_one(version)
        times.append(time.perf_counter() - start)
    return statistics.median(times[2:])


def floor_s(row: dict) -> float:
    """The version's bytes at the link's floor rate: the time of a line-rate copy."""
    return row["bytes"] / row["floor"]


def printed_row(name: str, row: dict) -> str:
    store_ms = f"{row['torchstore'] * 1e3:>9.1f}ms" if "torchstore" in row else f"{'':>11}"
    return (
        f"{row['rate']:>9} {row['floor'] * 8 / 1e9:>6.2f}Gb/s {name:>8} {row['bytes'] / 1e6:>7.1f}MB "
        f"{row['gloo'] * 1e3:>8.1f}ms {floor_s(row) * 1e3:>10.1f}ms {row['gloo'] / floor_s(row):>5.2f}x {store_ms}"
    )


async def run(sizes: list[int], rates: list[str], repeats: int, torchstore: bool) -> list[tuple[str, dict]]:
    """(state dict's name, measure()'s row) for each state dict and link rate, each printed as measured."""
    from benchmarks.harness.weight_endpoint import model_shapes, synthetic_shapes
    from forge_async.cluster.hosts import Hosts
    from forge_async.weights import store

    hosts = Hosts.from_env()
    await hosts.start()
    if torchstore:
        await store.start_store()
    print(
        f"{'link':>9} {'floor':>10} {'params':>8} {'bytes':>9} {'gloo':>10} {'bytes/floor':>12} {'ratio':>6} {'torchstore':>11}"
    )
    states = [("tiny", model_shapes("tiny", 8)[0]), *((f"{m}M", synthetic_shapes(m)) for m in sizes)]
    measured = []
    try:
        for name, shapes in states:
            for row in await measure(hosts, shapes, rates, repeats, torchstore):
                measured.append((name, row))
                print(printed_row(name, row), flush=True)
    finally:
        if torchstore:
            await store.stop_store()
    return measured


def result_of(measured: list[tuple[str, dict]]) -> BenchmarkResult:
    result = BenchmarkResult("cross_host_transfer", "Weights across hosts", this_command())
    for name, row in measured:
        result.figure(f"gloo / link floor, {name}, {row['rate']}", row["gloo"] / floor_s(row), "x")
        result.figure(f"gloo, {name}, {row['rate']}", row["gloo"] * 1e3, "ms")
        if "torchstore" in row:
            result.figure(f"torchstore, {name}, {row['rate']}", row["torchstore"] * 1e3, "ms")
    columns = [
        "link",
        "floor (Gbit/s)",
        "state dict",
        "MB",
        "gloo (ms)",
        "bytes / floor (ms)",
        "ratio",
        "torchstore (ms)",
    ]
    rows = [
        [
            row["rate"],
            row["floor"] * 8 / 1e9,
            name,
            row["bytes"] / 1e6,
            row["gloo"] * 1e3,
            floor_s(row) * 1e3,
            row["gloo"] / floor_s(row),
            row["torchstore"] * 1e3 if "torchstore" in row else None,
        ]
        for name, row in measured
    ]
    result.tables.append(Table("One version, node 0 -> node 1 (median of the steady-state versions)", columns, rows))
    names = [f"{name}, {row['rate']}" for name, row in measured]
    lines = [
        Line("gloo", names, [row["gloo"] * 1e3 for _, row in measured]),
        Line("bytes at the link's floor", names, [floor_s(row) * 1e3 for _, row in measured]),
    ]
    result.series.append(
        Series("A version across hosts against the link's floor", "", "ms", lines, log_y=True, bars=True)
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[100], help="millions of fp32 params (besides the tiny model)"
    )
    parser.add_argument(
        "--rates", nargs="+", default=["unshaped", "10gbit", "1gbit"], help="tc rates, e.g. 10gbit 500mbit"
    )
    parser.add_argument("--repeats", type=int, default=5, help="median of N")
    parser.add_argument("--torchstore", action="store_true", help="also time the torchstore path (unshaped)")
    add_json_argument(parser)
    args = parser.parse_args()
    if "FORGE_ASYNC_WORKERS" not in os.environ:
        sys.exit(drive(sys.argv[1:]))
    import forge_async  # noqa: F401

    measured = asyncio.run(run(args.sizes, args.rates, args.repeats, args.torchstore))
    if args.json:
        result_of(measured).write(args.json)
    from monarch.actor import shutdown_context

    shutdown_context().get(timeout=30)
