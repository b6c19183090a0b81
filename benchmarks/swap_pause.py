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
adapter, generation/adapter_slot.py); --lora-rank 0 skips the LoRA rows.

    .venv/bin/python -m benchmarks.swap_pause [--dim 64 --layers 2] [--lora-rank 8] [--cpu-weights packed]
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
from forge_async.actors.generator_config import GeneratorConfig  # noqa: E402
from forge_async.actors.generator_platform import EnginePlatform, prepare_process  # noqa: E402
from forge_async.generation.adapter_slot import AdapterSlot  # noqa: E402
from forge_async.generation.engine_weights import plain_cpu_weights  # noqa: E402
from forge_async.generation.versioned_engine import VersionedEngine  # noqa: E402
from forge_async.models.checkpoint import Checkpoint  # noqa: E402
from forge_async.models.config import LoraConfig, TinyModelConfig  # noqa: E402
from forge_async.models.peft import zero_adapter  # noqa: E402
from forge_async.models.tiny import create_tiny_checkpoint  # noqa: E402


def params(max_tokens: int):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=max_tokens, ignore_eos=True, logprobs=0, output_kind=RequestOutputKind.DELTA,
        detokenize=False,
    )


def run(engine: VersionedEngine, weights: dict, args, swap: bool) -> dict:
    """Steps a saturated engine for args.steps steps; returns tokens/s and swap pauses."""
    sampling = params(args.max_tokens)
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
            model=str(checkpoint.path), dtype="float32", max_model_len=64, kv_cache_memory_bytes=2**29,
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
        yield "lora", {name: 0.01 * torch.randn(t.shape) for name, t in adapter.items()}, lambda: AdapterSlot(
            lora, checkpoint, torch.float32
        )


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
    args = parser.parse_args()
    # as a generator proc does, before vLLM starts
    platform = prepare_process(GeneratorConfig(cpu_weights=args.cpu_weights))

    with tempfile.TemporaryDirectory() as tmp:
        shape = TinyModelConfig(dim=args.dim, n_layers=args.layers, ffn_dim=4 * args.dim, max_seq_len=64)
        checkpoint = Checkpoint.open(create_tiny_checkpoint(Path(tmp) / "model", shape))
        n_params = sum(torch.Size(s).numel() for s in checkpoint.weight_shapes().values())
        print(f"model: {n_params / 1e6:.2f}M params; {args.concurrency} requests kept running, "
              f"swap every {args.swap_every} steps, {args.steps} steps per mode\n")
        print(f"{'weights':>8} {'mode':>10} {'bytes':>10} {'swaps':>6} {'reload mean':>12} {'reload max':>11} "
              f"{'latency mean':>13} {'tokens/s':>10} {'vs no swap':>11}")
        for label, weights, slot in payloads(checkpoint, args.lora_rank):
            size = sum(t.numel() * t.element_size() for t in weights.values())
            for mode in ("inflight", "drain"):
                engine = start_engine(checkpoint, mode, platform, slot() if slot else None)
                run(engine, weights, args, swap=False)  # warm-up
                base = run(engine, weights, args, swap=False)
                swapped = run(engine, weights, args, swap=True)
                r, lat = swapped["reloads"], swapped["latencies"]
                print(
                    f"{label:>8} {mode:>10} {size / 1e6:>8.3f}MB {len(r):>6} {statistics.fmean(r):>10.1f}ms "
                    f"{max(r):>9.1f}ms {statistics.fmean(lat):>11.1f}ms "
                    f"{swapped['tokens_per_s']:>10,.0f} {swapped['tokens_per_s'] / base['tokens_per_s']:>10.2f}x",
                    flush=True,
                )
                del engine


if __name__ == "__main__":
    main()
