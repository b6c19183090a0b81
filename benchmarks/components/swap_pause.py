"""Generation pause per weight swap: in-flight vs drain, on a real vLLM engine, in one run.

Keeps `--concurrency` requests running (a new one starts as soon as one ends),
swaps weights every `--swap-every` engine steps, and reports per mode:

- reload: the generation pause of the weight load itself (no engine step runs).
- latency: from "a new version is available" to "it is in use". In flight that
  is the reload; drain adds the wait for running requests to finish, during
  which no new request is admitted and the engine runs below capacity.
- tokens/s, against the same workload with no swaps (the cost of both).

Each mode runs twice: swapping the full weights (an engine serving the plain
model), and swapping a LoRA adapter of `--lora-rank` (an engine serving base +
adapter, generation/adapter_slot.py); --lora-rank 0 skips the LoRA rows. With --json,
the same in the report's shape (benchmarks/harness/results.py).

    .venv/bin/python -m benchmarks.components.swap_pause [--dim 64 --layers 2] [--lora-rank 8] [--cpu-weights packed]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import forge_async  # noqa: E402,F401
from benchmarks.harness.engine_sampling import fixed_length  # noqa: E402
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command  # noqa: E402
from forge_async.generation.config import GeneratorConfig  # noqa: E402
from forge_async.generation.platform import EnginePlatform, prepare_process  # noqa: E402
from forge_async.generation.adapter_slot import AdapterSlot  # noqa: E402
from forge_async.generation.engine_weights import plain_cpu_weights  # noqa: E402
from forge_async.generation.versioned_engine import VersionedEngine  # noqa: E402
from forge_async.models.hf_checkpoint import Checkpoint  # noqa: E402
from forge_async.models.config import LoraConfig, TinyModelConfig  # noqa: E402
from forge_async.models.peft import zero_adapter  # noqa: E402
from forge_async.models.tiny import create_tiny_checkpoint  # noqa: E402


def run(engine: VersionedEngine, weights: dict, args, swap: bool) -> dict:
    """Steps a saturated engine for args.steps steps; returns tokens/s and swap pauses."""
    sampling = fixed_length(args.max_tokens)
    requests = [engine.submit([11, 1, 2, 3, 13], sampling) for _ in range(args.concurrency)]
    tokens, reloads, latencies, version = 0, [], [], engine.version
    swap_wanted_at = None
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        if swap and step % args.swap_every == 0 and swap_wanted_at is None:
            swap_wanted_at = time.perf_counter()
            engine.draining = engine.swap_mode == "drain"
        if swap_wanted_at is not None and (engine.swap_mode == "inflight" or not engine.running):
            version += 1
            reloads.append(engine.swap(weights, version))
            latencies.append((time.perf_counter() - swap_wanted_at) * 1e3)
            swap_wanted_at = None
        engine.step()
        for i, request in enumerate(requests):
            if request.result is not None:
                tokens += len(request.result.token_ids)
                requests[i] = engine.submit([11, 1, 2, 3, 13], sampling)
    elapsed = time.perf_counter() - start
    while engine.has_work:  # leave the engine idle for the next mode
        engine.draining = False
        engine.step()
    return {"tokens_per_s": tokens / elapsed, "reloads": reloads, "latencies": latencies}


def start_engine(checkpoint: Checkpoint, mode: str, platform: EnginePlatform, slot: AdapterSlot | None):
    from vllm import LLM

    with plain_cpu_weights(platform.plain_weights):
        llm = LLM(
            model=str(checkpoint.path),
            dtype="float32",
            max_model_len=64,
            kv_cache_memory_bytes=2**29,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs(mode),
            **(slot.llm_kwargs() if slot else {}),
        )
    return VersionedEngine(llm, mode, adapter=slot)


def payloads(checkpoint: Checkpoint, rank: int):
    """(label, what each swap loads, its adapter slot or None): full weights, then LoRA adapters."""
    yield "full", checkpoint.load_hf_state_dict(), None
    if rank:
        lora = LoraConfig(rank=rank)
        adapter = zero_adapter(checkpoint.weight_shapes(), lora, torch.float32)
        yield (
            "lora",
            {name: 0.01 * torch.randn(t.shape) for name, t in adapter.items()},
            lambda: AdapterSlot(lora, checkpoint, torch.float32),
        )


COLUMNS = [
    "weights",
    "mode",
    "MB",
    "swaps",
    "reload mean (ms)",
    "reload max (ms)",
    "latency mean (ms)",
    "tokens/s",
    "vs no swap (x)",
]


def measured_row(label: str, mode: str, size: int, base: dict, swapped: dict) -> list:
    """One row of COLUMNS: a mode's swaps of one kind of weights, against its run with none."""
    r, lat = swapped["reloads"], swapped["latencies"]
    return [
        label,
        mode,
        size / 1e6,
        len(r),
        statistics.fmean(r),
        max(r),
        statistics.fmean(lat),
        swapped["tokens_per_s"],
        swapped["tokens_per_s"] / base["tokens_per_s"],
    ]


def print_row(row: list) -> None:
    label, mode, megabytes, swaps, reload_mean, reload_max, latency, tokens_per_s, ratio = row
    print(
        f"{label:>8} {mode:>10} {megabytes:>8.3f}MB {swaps:>6} {reload_mean:>10.1f}ms {reload_max:>9.1f}ms "
        f"{latency:>11.1f}ms {tokens_per_s:>10,.0f} {ratio:>10.2f}x",
        flush=True,
    )


def result_of(rows: list[list]) -> BenchmarkResult:
    result = BenchmarkResult("swap_pause", "Generation pause per weight swap", this_command())
    for label, mode, _, _, reload_mean, _, latency, _, ratio in rows:
        result.figure(f"{label} {mode}: reload mean", reload_mean, "ms")
        result.figure(f"{label} {mode}: new weights in use after (mean)", latency, "ms")
        result.figure(f"{label} {mode}: tokens/s vs no swap", ratio, "x")
    result.tables.append(Table("Swaps every --swap-every engine steps, against the same run with none", COLUMNS, rows))
    lines = [
        Line(kind, [row[1] for row in rows if row[0] == kind], [row[6] for row in rows if row[0] == kind])
        for kind in dict.fromkeys(row[0] for row in rows)
    ]  # full, then lora
    result.series.append(Series("New weights in use after (mean), per mode", "mode", "ms", lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--swap-every", type=int, default=20)
    parser.add_argument("--lora-rank", type=int, default=8, help="0: full weights only")
    parser.add_argument("--cpu-weights", default="plain", choices=("plain", "packed"), help="generator.cpu_weights")
    add_json_argument(parser)
    args = parser.parse_args()
    # as a generator proc does, before vLLM starts
    platform = prepare_process(GeneratorConfig(cpu_weights=args.cpu_weights))

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        shape = TinyModelConfig(dim=args.dim, n_layers=args.layers, ffn_dim=4 * args.dim, max_seq_len=64)
        checkpoint = Checkpoint.open(create_tiny_checkpoint(Path(tmp) / "model", shape))
        n_params = sum(torch.Size(s).numel() for s in checkpoint.weight_shapes().values())
        print(
            f"model: {n_params / 1e6:.2f}M params; {args.concurrency} requests kept running, "
            f"swap every {args.swap_every} steps, {args.steps} steps per mode\n"
        )
        print(
            f"{'weights':>8} {'mode':>10} {'bytes':>10} {'swaps':>6} {'reload mean':>12} {'reload max':>11} "
            f"{'latency mean':>13} {'tokens/s':>10} {'vs no swap':>11}"
        )
        for label, weights, slot in payloads(checkpoint, args.lora_rank):
            size = sum(t.numel() * t.element_size() for t in weights.values())
            for mode in ("inflight", "drain"):
                engine = start_engine(checkpoint, mode, platform, slot() if slot else None)
                run(engine, weights, args, swap=False)  # warm-up
                base = run(engine, weights, args, swap=False)
                rows.append(measured_row(label, mode, size, base, run(engine, weights, args, swap=True)))
                print_row(rows[-1])
                del engine
    if args.json:
        result_of(rows).write(args.json)


if __name__ == "__main__":
    main()
