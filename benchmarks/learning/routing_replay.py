"""Rollout routing replay: how far the trainer's logprobs are from the generator's, replaying or not.

For each seed, a tiny Qwen3-MoE is sampled by a real vLLM engine (with the generator's route
capture, generation/route_capture.py), and the same rollouts are scored by the trainer's
TorchTitan model through the trainer's own packing and routers (models/routes.py), with the
generator's routes only compared (moe.routing_replay=off) or replayed (rollout). Rows:

- generator bf16 -> trainer fp32 (the usual set-up) and -> trainer bf16;
- generator fp32 -> trainer fp32: the same-dtype control. Where it shows no mismatch, there is
  nothing for replay to remove, and any effect elsewhere is the dtype's.

Per row: route mismatch (token routes whose expert set differs), k3 KL(generator || trainer) per
token, max and 99th-percentile |logprob difference|, and the share of tokens whose ratio
pi_trainer / pi_generator leaves [0.8, 1.25]; mean and spread over the seeds.

Costs: bytes of routes per token and per step; the trainer's forward + backward with routes
compared and replayed against none at all; the generator's decode with its route capture against
an engine without.

    .venv/bin/python -m benchmarks.learning.routing_replay [--seeds 3] [--layers 4 --experts 16 --top-k 2]
"""

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import forge_async  # noqa: E402,F401
from forge_async.generation.config import GeneratorConfig  # noqa: E402
from forge_async.generation.platform import prepare_process  # noqa: E402
from forge_async.data.batch import TrainBatch, pack_episodes  # noqa: E402
from forge_async.data.episode import Completion, Episode  # noqa: E402
from forge_async.generation.engine_weights import plain_cpu_weights  # noqa: E402
from forge_async.generation.route_capture import route_capture  # noqa: E402
from forge_async.generation.versioned_engine import VersionedEngine  # noqa: E402
from forge_async.losses.grpo import response_logprobs  # noqa: E402
from forge_async.models.hf_checkpoint import Checkpoint  # noqa: E402
from forge_async.models.config import TinyModelConfig  # noqa: E402
from forge_async.models.routes import RouteMismatch, routes_given  # noqa: E402
from forge_async.models.tiny import create_tiny_checkpoint  # noqa: E402
from forge_async.models.titan import build_titan_model, state_dict_adapter  # noqa: E402
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command  # noqa: E402
from benchmarks.harness.engine_sampling import fixed_length  # noqa: E402

PAIRS = (("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("float32", "float32"))
RATIO_BAND = (0.8, 1.25)
QWEN3_30B_A3B = (48, 8)  # MoE layers, experts per token


def build_engine(checkpoint: Checkpoint, dtype: str, capture: bool) -> VersionedEngine:
    """The generator's engine as a generator proc builds it (CPU, plain weights, prefix caching)."""
    platform = prepare_process(GeneratorConfig())
    shape = checkpoint.shape
    routes = route_capture(shape.moe, shape.n_layers, platform.on_gpu, "abort_resume") if capture else None
    from vllm import LLM

    with plain_cpu_weights(platform.plain_weights):
        llm = LLM(
            model=str(checkpoint.path),
            dtype=dtype,
            max_model_len=shape.max_seq_len,
            seed=0,
            kv_cache_memory_bytes=2**27,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs("abort_resume"),
            **(routes.llm_kwargs() if routes else {}),
        )
    return VersionedEngine(llm, "abort_resume", routes=routes)


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[11] + rng.integers(0, 10, length).tolist() + [13] for _ in range(count)]


def rollouts(engine: VersionedEngine, args, seed: int) -> list[Completion]:
    """args.prompts x args.samples completions (GRPO groups) of random digit prompts."""
    params = fixed_length(args.max_tokens)
    requests = [
        engine.submit(p, params) for p in prompts(args.prompts, args.prompt_len, seed) for _ in range(args.samples)
    ]
    while engine.has_work:
        engine.step()
    return [r.result for r in requests]


def decode_cost(checkpoint: Checkpoint, args) -> dict[str, float]:
    """Median tokens/s of the rollouts' workload on two warm bf16 engines, with and without the
    route capture, timed in interleaved rounds (a shared box drifts)."""
    engines = {
        kind: build_engine(checkpoint, "bfloat16", capture=kind == "with capture")
        for kind in ("with capture", "without")
    }
    rates: dict[str, list[float]] = {kind: [] for kind in engines}
    for round_ in range(args.rounds + 1):
        for kind, engine in engines.items():
            start = time.perf_counter()
            rollouts(engine, args, seed=round_)
            if round_:  # round 0 warms both up
                rates[kind].append(args.prompts * args.samples * args.max_tokens / (time.perf_counter() - start))
    return {kind: statistics.median(r) for kind, r in rates.items()}


def trainer_model(checkpoint: Checkpoint, dtype: str) -> torch.nn.Module:
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(checkpoint.load_hf_state_dict()))
    return model.to(getattr(torch, dtype))


def train_batch(completions: list[Completion], pad_id: int) -> TrainBatch:
    return pack_episodes([Episode(c, 0.0, 1.0) for c in completions], pad_id)


def scored(model, batch: TrainBatch, replay: bool) -> dict[str, float]:
    """The trainer's logprobs of the batch against the generator's, and its route mismatch."""
    mismatch = RouteMismatch(model)
    with torch.no_grad(), routes_given(model, batch.routes, replay):
        logprobs = response_logprobs(model, batch)[0]
        mismatch.add_last_forward()
    mask = batch.response_mask.bool()
    diff = (logprobs - batch.behaviour_logprobs)[mask].double()  # log pi_trainer - log pi_generator
    ratio = diff.exp()
    k3 = (ratio - 1 - diff).mean()  # KL(generator || trainer), sampled from the generator
    return {
        "mismatch": (mismatch.differ.sum() / mismatch.compared.sum()).item(),
        "k3": k3.item(),
        "max": diff.abs().max().item(),
        "p99": diff.abs().quantile(0.99).item(),
        "outside": ((ratio < RATIO_BAND[0]) | (ratio > RATIO_BAND[1])).double().mean().item(),
    }


def step_ms(model, batch: TrainBatch, routes, replay: bool, repeats: int) -> list[float]:
    """Forward + backward of the batch's logprobs, as a training step runs them, in ms."""
    times = []
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with routes_given(model, routes, replay):
            response_logprobs(model, batch)[0].sum().backward()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def step_cost(model, batch: TrainBatch, rounds: int) -> dict[str, float]:
    """Median step time with no routes, routes compared, routes replayed (interleaved rounds)."""
    kinds = {"none": (None, False), "compared": (batch.routes, False), "replayed": (batch.routes, True)}
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    step_ms(model, batch, None, False, 2)  # warm-up
    for _ in range(rounds):
        for kind, (routes, replay) in kinds.items():
            times[kind] += step_ms(model, batch, routes, replay, 3)
    return {kind: statistics.median(t) for kind, t in times.items()}


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.3g} ± {statistics.stdev(values):.2g}" if len(values) > 1 else f"{mean:.3g}"


COLUMNS = [
    "generator -> trainer",
    "replay",
    "route mismatch",
    "k3 KL",
    "max abs dlogp",
    "p99 abs dlogp",
    "ratio outside [0.8, 1.25]",
]


def table_rows(results: dict[tuple, list[dict]]) -> list[list[str]]:
    return [
        [f"{gen} -> {train}", "rollout" if replay else "off"]
        + [spread([r[key] for r in rows]) for key in ("mismatch", "k3", "max", "p99", "outside")]
        for (gen, train, replay), rows in results.items()
    ]


def kl_cuts(results: dict[tuple, list[dict]], gen: str, train: str) -> list[float]:
    """KL with routes compared over KL with routes replayed, per seed."""
    off, on = results[(gen, train, False)], results[(gen, train, True)]
    return [a["k3"] / b["k3"] if b["k3"] > 0 else float("inf") for a, b in zip(off, on)]


def print_table(results: dict[tuple, list[dict]], seeds: int) -> None:
    print(f"\n## Trainer vs generator logprobs, same rollouts (mean ± stdev over {seeds} seeds)\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in table_rows(results):
        print("| " + " | ".join(row) + " |")
    print("\nKL cut by replay (off / rollout, per seed, then the mean):")
    for gen, train in PAIRS:
        cuts = kl_cuts(results, gen, train)
        print(f"  {gen} -> {train}: " + ", ".join(f"{c:.2f}x" for c in cuts) + f"; mean {statistics.fmean(cuts):.2f}x")


def result_of(
    results: dict[tuple, list[dict]], cost: dict[str, float], decode: dict[str, float], seeds: int
) -> BenchmarkResult:
    result = BenchmarkResult("routing_replay", "Rollout routing replay", this_command())
    for gen, train in PAIRS[:2]:
        result.figure(f"KL cut by replay, {gen} -> {train}", statistics.fmean(kl_cuts(results, gen, train)), "x")
    result.figure("trainer step with routes replayed vs none", cost["replayed"] / cost["none"] - 1, "fraction")
    result.figure(
        "generator decode with route capture vs without", decode["with capture"] / decode["without"] - 1, "fraction"
    )
    result.tables.append(
        Table(
            f"Trainer vs generator logprobs, same rollouts (mean ± stdev over {seeds} seeds)",
            COLUMNS,
            table_rows(results),
        )
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt (a GRPO group)")
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of each cost comparison")
    add_json_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() // 2))
    results: dict[tuple, list[dict]] = {(g, t, r): [] for g, t in PAIRS for r in (False, True)}
    cost = None
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            tiny = TinyModelConfig(
                family="qwen3_moe",
                n_layers=args.layers,
                num_experts=args.experts,
                top_k=args.top_k,
                dim=args.dim,
                seed=seed,
            )
            checkpoint = Checkpoint.open(create_tiny_checkpoint(Path(tmp) / f"seed{seed}", tiny))
            models = {dtype: trainer_model(checkpoint, dtype) for dtype in ("float32", "bfloat16")}
            for gen_dtype in ("bfloat16", "float32"):
                engine = build_engine(checkpoint, gen_dtype, capture=True)
                completions = rollouts(engine, args, seed)
                pad_id = engine.tokenizer.pad_token_id
                del engine
                gc.collect()
                batch = train_batch(completions, pad_id)
                for gen, train in PAIRS:
                    if gen == gen_dtype:
                        for replay in (False, True):
                            results[(gen, train, replay)].append(scored(models[train], batch, replay))
                if seed == 0 and gen_dtype == "bfloat16":
                    cost = step_cost(models["float32"], batch, args.rounds)
                    routes_bytes = int(batch.routes[..., 0].ne(255).sum()) * args.layers * args.top_k
                    fed_tokens = int(batch.routes[..., 0].ne(255).sum())
            if seed == 0:
                decode = decode_cost(checkpoint, args)
                gc.collect()
            print(f"seed {seed} done", flush=True)
    print(
        f"\nmodel: tiny Qwen3-MoE, {args.layers} layers x {args.experts} experts (top {args.top_k}), dim {args.dim}; "
        f"{args.prompts} prompts x {args.samples} samples x {args.max_tokens} tokens per seed"
    )
    print_table(results, args.seeds)
    print("\n## Costs\n")
    per_token = args.layers * args.top_k
    print(
        f"routes: {per_token} B per token fed ({args.layers} layers x top {args.top_k}, uint8); this batch "
        f"{routes_bytes / 1024:.1f} KiB for {fed_tokens} tokens fed; Qwen3-30B-A3B: "
        f"{QWEN3_30B_A3B[0] * QWEN3_30B_A3B[1]} B per token"
    )
    print(
        f"trainer forward + backward (fp32, median ms): no routes {cost['none']:.2f}, routes compared "
        f"{cost['compared']:.2f} ({cost['compared'] / cost['none'] - 1:+.1%}), replayed {cost['replayed']:.2f} "
        f"({cost['replayed'] / cost['none'] - 1:+.1%}; vs compared {cost['replayed'] / cost['compared'] - 1:+.1%})"
    )
    with_capture, without = decode["with capture"], decode["without"]
    print(
        f"generator decode (bf16, median tokens/s): with route capture {with_capture:.0f}, without "
        f"{without:.0f} ({with_capture / without - 1:+.1%})"
    )
    if args.json:
        result_of(results, cost, decode, args.seeds).write(args.json)


if __name__ == "__main__":
    main()
