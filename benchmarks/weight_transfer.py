"""Weight transfer trainer -> generator: shared memory vs torchstore RPC vs memcpy, in one run.

For state dicts of about 10M, 100M and 500M fp32 parameters (transformer-like
tensor sizes), times moving the weights from one Monarch proc (the writer, as
the trainer) into preallocated tensors in another (the reader, as the
generator's parameters):

- memcpy: one `copy_` of the same bytes inside one process, one thread: the
          physical floor of one copy. (A transfer that ends in the reader's own
          memory, as vLLM's parameters do, needs two: writer -> shared, shared -> reader.)
- shm:    forge_async's path. The writer copies into the version's slot in
          /dev/shm and publishes it; the reader copies out of its mapping of the
          slot. The first two versions fill the two slots (page faults) and are
          reported apart from the steady state.
- torchstore: put_state_dict / get_state_dict over Monarch RPC.

    .venv/bin/python -m benchmarks.weight_transfer [--sizes 10 100 500] [--repeats 3]
"""

import argparse
import asyncio
import os
import time
from pathlib import Path

import torch
from monarch.actor import Actor, endpoint, this_host

import forge_async  # noqa: F401
from forge_async.weights import store
from forge_async.weights.config import default_root
from forge_async.weights.shared_memory import SharedMemoryChannel, plan_layout

LAYER_PARAMS = 4 * 1024 * 1024  # ~4M parameters per tensor, like one projection of a 1-2B model


def make_state_dict(millions: int) -> dict[str, torch.Tensor]:
    count = max(1, millions * 1_000_000 // LAYER_PARAMS)
    return {f"layers.{i}.weight": torch.randn(LAYER_PARAMS // 1024, 1024) for i in range(count)}


class Endpoint(Actor):
    """Holds a state dict (writer) or preallocated destination tensors (reader)."""

    def __init__(self, millions: int, channel_dir: str):
        torch.set_num_threads(1)
        self.state_dict = make_state_dict(millions)
        self.channel = SharedMemoryChannel(channel_dir)

    @endpoint
    async def write_shm(self, version: int) -> float:
        start = time.perf_counter()
        header, slots, size = plan_layout({k: (tuple(t.shape), t.dtype) for k, t in self.state_dict.items()})
        buffer = self.channel.begin_write(version, header, size)
        for name, tensor in self.state_dict.items():
            self.channel.view(buffer, slots[name]).copy_(tensor)
        self.channel.publish(version)
        return time.perf_counter() - start

    @endpoint
    async def read_shm(self) -> float:
        start = time.perf_counter()
        with self.channel.reading(self.channel.latest()) as (_, views):
            for name, view in views.items():
                self.state_dict[name].copy_(view)
        return time.perf_counter() - start

    @endpoint
    async def put_torchstore(self, version: int) -> float:
        start = time.perf_counter()
        await store.put_policy(self.state_dict, version)
        return time.perf_counter() - start

    @endpoint
    async def get_torchstore(self, version: int) -> float:
        start = time.perf_counter()
        fetched = await store.get_policy(version)
        for name, tensor in fetched.items():
            self.state_dict[name].copy_(tensor)
        elapsed = time.perf_counter() - start
        await store.delete_versions_before(version + 1)
        return elapsed

    @endpoint
    async def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.state_dict.values()))


def memcpy_s(millions: int, repeats: int) -> float:
    torch.set_num_threads(1)  # as in the writer and reader procs
    src, dst = make_state_dict(millions), make_state_dict(millions)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for name, tensor in src.items():
            dst[name].copy_(tensor)
        times.append(time.perf_counter() - start)
    return min(times)


async def measure(millions: int, repeats: int, torchstore: bool) -> dict[str, float]:
    channel_dir = str(default_root() / f"forge_async-bench-{os.getpid()}")
    procs = this_host().spawn_procs(per_host={"procs": 2})
    writer = procs.slice(procs=0).spawn("writer", Endpoint, millions, channel_dir)
    reader = procs.slice(procs=1).spawn("reader", Endpoint, millions, channel_dir)
    figures = {}
    try:
        shm = []
        for v in range(1, repeats + 3):
            shm.append(await writer.write_shm.call_one(v) + await reader.read_shm.call_one())
        figures["shm_first"] = shm[0]
        figures["shm"] = min(shm[2:])
        assert await reader.checksum.call_one() == await writer.checksum.call_one()
        if torchstore:
            rpc = []
            for v in range(1, repeats + 1):
                rpc.append(await writer.put_torchstore.call_one(v) + await reader.get_torchstore.call_one(v))
            figures["torchstore"] = min(rpc)
    finally:
        await procs.stop()
        SharedMemoryChannel(channel_dir).remove()
    figures["memcpy"] = memcpy_s(millions, repeats + 2)  # with the procs gone: nothing competes
    return figures


async def main(sizes: list[int], repeats: int, torchstore_max: int) -> None:
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])  # procs import this module
    await store.start_store()
    print(f"{'params':>8} {'bytes':>9} {'memcpy':>10} {'shm 1st':>10} {'shm':>10} {'shm/memcpy':>11} {'torchstore':>11} {'rpc/memcpy':>11}")
    try:
        for millions in sizes:
            f = await measure(millions, repeats, torchstore=millions <= torchstore_max)
            gb = sum(t.numel() * 4 for t in make_state_dict(millions).values()) / 1e9
            rpc = f.get("torchstore")
            print(
                f"{millions:>7}M {gb:>8.2f}G {f['memcpy'] * 1e3:>8.1f}ms {f['shm_first'] * 1e3:>8.1f}ms "
                f"{f['shm'] * 1e3:>8.1f}ms "
                f"{f['shm'] / f['memcpy']:>10.2f}x "
                + (f"{rpc * 1e3:>9.1f}ms {rpc / f['memcpy']:>10.1f}x" if rpc else f"{'skipped':>11}")
            , flush=True)
    finally:
        await store.stop_store()
    from monarch.actor import shutdown_context

    await shutdown_context()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 500], help="millions of params")
    parser.add_argument("--repeats", type=int, default=3, help="best of N")
    parser.add_argument("--torchstore-max", type=int, default=500, help="skip torchstore above this size")
    args = parser.parse_args()
    asyncio.run(main(args.sizes, args.repeats, args.torchstore_max))
