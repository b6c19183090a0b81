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

With `--models tiny 100m`, the same for real models' tensors: each model's full
weights (what a full fine-tuning run syncs) against its LoRA adapters of
`--lora-rank` on the default targets (what a LoRA run syncs), and the ratio of
the two; the adapter row's shm/memcpy compares with a memcpy of the adapter bytes.

    .venv/bin/python -m benchmarks.components.weight_transfer [--sizes 10 100 500] [--repeats 3]
    .venv/bin/python -m benchmarks.components.weight_transfer --sizes --models tiny 100m --repeats 20
"""

import argparse
import asyncio
import os
import time
from pathlib import Path

import torch
from monarch.actor import this_host

import forge_async  # noqa: F401
from forge_async.weights import store
from forge_async.weights.config import default_root
from forge_async.weights.shared_memory import SharedMemoryChannel
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from benchmarks.harness.weight_endpoint import (
    MODELS,
    Endpoint,
    Shapes,
    make_state_dict,
    model_shapes,
    nbytes,
    synthetic_shapes,
)


def memcpy_s(shapes: Shapes, repeats: int) -> float:
    torch.set_num_threads(1)  # as in the writer and reader procs
    src, dst = make_state_dict(shapes), make_state_dict(shapes)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for name, tensor in src.items():
            dst[name].copy_(tensor)
        times.append(time.perf_counter() - start)
    return min(times)


async def measure(shapes: Shapes, repeats: int, torchstore: bool) -> dict[str, float]:
    channel_dir = str(default_root() / f"forge_async-bench-{os.getpid()}")
    procs = this_host().spawn_procs(per_host={"procs": 2})
    writer = procs.slice(procs=0).spawn("writer", Endpoint, shapes, channel_dir)
    reader = procs.slice(procs=1).spawn("reader", Endpoint, shapes, channel_dir)
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
    figures["memcpy"] = memcpy_s(shapes, repeats + 2)  # with the procs gone: nothing competes
    return figures


def row(label: str, shapes: Shapes, f: dict[str, float]) -> str:
    rpc = f.get("torchstore")
    return (
        f"{label:>12} {nbytes(shapes) / 1e6:>9.3f}MB {f['memcpy'] * 1e3:>9.3f}ms {f['shm_first'] * 1e3:>9.3f}ms "
        f"{f['shm'] * 1e3:>9.3f}ms {f['shm'] / f['memcpy']:>10.2f}x "
        + (f"{rpc * 1e3:>9.1f}ms {rpc / f['memcpy']:>10.1f}x" if rpc else f"{'skipped':>11}")
    )


HEADER = (
    f"{'weights':>12} {'bytes':>11} {'memcpy':>11} {'shm 1st':>11} {'shm':>11} {'shm/memcpy':>11} "
    f"{'torchstore':>11} {'rpc/memcpy':>11}"
)


async def synthetic(sizes: list[int], repeats: int, torchstore_max: int) -> list[tuple[float, dict[str, float]]]:
    """Prints a row per size; returns (MB, figures) per size."""
    print(HEADER)
    measured = []
    for millions in sizes:
        shapes = synthetic_shapes(millions)
        f = await measure(shapes, repeats, torchstore=millions <= torchstore_max)
        print(row(f"{millions}M", shapes, f), flush=True)
        measured.append((nbytes(shapes) / 1e6, f))
    return measured


def result_of(measured: list[tuple[float, dict[str, float]]]) -> BenchmarkResult:
    result = BenchmarkResult("weight_transfer", "Weight transfer, trainer -> generator", this_command())
    megabytes, largest = measured[-1]
    result.figure(f"shm / memcpy, {megabytes:.0f} MB version", largest["shm"] / largest["memcpy"], "x")
    result.figure(f"shm, {megabytes:.0f} MB version", largest["shm"] * 1e3, "ms")
    columns = ["MB", "memcpy (ms)", "shm first (ms)", "shm (ms)", "shm / memcpy", "torchstore (ms)"]
    rows = [
        [
            round(mb, 1),
            f["memcpy"] * 1e3,
            f["shm_first"] * 1e3,
            f["shm"] * 1e3,
            f["shm"] / f["memcpy"],
            f["torchstore"] * 1e3 if "torchstore" in f else None,
        ]
        for mb, f in measured
    ]
    result.tables.append(Table("One version, writer proc -> reader proc (best of the repeats)", columns, rows))
    lines = [
        Line(label, [mb for mb, f in measured if key in f], [f[key] * 1e3 for _, f in measured if key in f])
        for label, key in (("memcpy (one copy)", "memcpy"), ("shared memory", "shm"), ("torchstore", "torchstore"))
    ]
    result.series.append(
        Series("Weight transfer against memcpy across sizes", "version (MB)", "ms", lines, log_x=True, log_y=True)
    )
    return result


async def full_vs_adapters(models: list[str], rank: int, repeats: int) -> None:
    """Per model: its full weights, its adapters, and what the adapters cost against the full sync."""
    print(f"\nfull weights vs LoRA adapters (rank {rank}, targets: attention and MLP projections)")
    print(HEADER + f" {'shm vs full':>12} {'bytes vs full':>14}")
    for model in models:
        full_shapes, adapter_shapes = model_shapes(model, rank)
        full = await measure(full_shapes, repeats, torchstore=True)
        adapters = await measure(adapter_shapes, repeats, torchstore=True)
        print(row(f"{model} full", full_shapes, full), flush=True)
        print(
            row(f"{model} lora", adapter_shapes, adapters)
            + f" {adapters['shm'] / full['shm']:>11.3f}x {nbytes(adapter_shapes) / nbytes(full_shapes):>13.4f}x",
            flush=True,
        )


async def main(args) -> None:
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # procs import this module
    await store.start_store()
    try:
        if args.sizes:
            measured = await synthetic(args.sizes, args.repeats, args.torchstore_max)
            if args.json:
                result_of(measured).write(args.json)
        if args.models:
            await full_vs_adapters(args.models, args.lora_rank, args.repeats)
    finally:
        await store.stop_store()
    from monarch.actor import shutdown_context

    await shutdown_context()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 500], help="millions of params")
    parser.add_argument("--models", nargs="*", default=[], choices=list(MODELS), help="full vs LoRA adapters")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="best of N")
    parser.add_argument("--torchstore-max", type=int, default=500, help="skip torchstore above this size")
    add_json_argument(parser)
    asyncio.run(main(parser.parse_args()))
