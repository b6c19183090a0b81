"""Long-tailed completion lengths: forge_async against TRL's synchronous GRPOTrainer, side by side.

    pip install -e ".[bench]"    # TRL, for this benchmark only
    .venv/bin/python -m benchmarks.pipeline.long_tail [--runs 1] [--steps N] [--cases digits,reasoning_gym]
    .venv/bin/python -m benchmarks.pipeline.long_tail --trl-threads 1   # TRL with one torch thread alone
    .venv/bin/python -m benchmarks.pipeline.long_tail --variant "2 generators=generator.count=2" [-- overrides ...]

A batch waits for its slowest completion: a synchronous trainer pads every batch to its longest
completion and idles while it is generated; forge_async's generator streams samples as they
finish and its trainer overlaps generation. Two length distributions, each with up to 256 new
tokens and 16 prompts x 8 completions a step, on both sides:

- digits: the CPU default's max-of-5-digits task on its tiny model, untrained (lr 1e-12, so
  the lengths stay the untrained model's over the whole run: EOS is one of the digit
  tokenizer's 14 tokens, a geometric length of mean ~15 with a tail past 100);
- reasoning_gym: configs/reasoning_gym.yaml's chain_sum prompts on the byte-tokenizer tiny
  model, untrained: lengths spread over the whole budget, mean ~160, many cut at 256.

Each run is a process launched as a user would (`python -m apps.grpo ...` and
`python -m benchmarks.pipeline.trl_grpo ...`, alternated: forge_async, TRL with torch's threads,
TRL with one (--trl-threads), forge_async, ..., same checkpoint, same seed), neither evaluating
nor checkpointing; ratios are against the fastest TRL side. Measured after each case's first
few steps, between that step's console line and the last: completion tokens trained per
second (both sides train every completion they keep; forge_async drops none here unless a
variant makes it), and the same per CPU-second the side's processes used (a box shared with
other work gives each side what the others leave: the per-CPU figure holds where the wall-clock
one drifts), steps/s; for forge_async the trainer's idle share, the generator's (its
engine not stepping, summary.json), the cores each proc used, the engine's running batch per
engine step (`generator/running_mean`) and the share of engine steps with fewer than half of
the calls' samples still running (`generator/under_half_frac`, docs/metrics.md).

`--variant LABEL=OVERRIDES` (comma-separated Hydra overrides; repeatable) adds a forge_async
side with those overrides to every alternation: candidates measured against the same TRL
runs, in the same hour. With --json, the report's shape (benchmarks/harness/results.py).
"""

import argparse
import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.harness.app_run import REPO, STEP_LINE, launch_trl, timed_run
from benchmarks.harness.proc_cpu import ProcCpu
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.observability.metrics import read_rows

MAX_TOKENS = 256
LR = 1e-12  # untrained: the lengths stay those of the initial model
FORGE = "forge_async"
# TRL's sides by --trl-threads: torch's default threads (0: both cores), one thread. On a box
# shared with other work, two threads wait for each other at every small op (a scheduler slice
# each time, several ms on the tiny model's microsecond ops): one thread is then several times
# faster. The ratios are taken against the fastest TRL side.


def trl_side(threads: int) -> str:
    return "TRL" if threads == 0 else f"TRL, {threads} thread{'s' if threads > 1 else ''}"


_TRL_STEP = re.compile(r"^step (\d+) reward [0-9.]+ mean_length ([0-9.]+)$")
COMPLETIONS_PER_STEP = 16 * 8


@dataclass(frozen=True)
class Case:
    title: str
    tiny: TinyModelConfig
    forge: tuple[str, ...]  # forge_async's overrides (a --config-name first)
    trl: tuple[str, ...]  # trl_grpo's task arguments
    steps: int  # per run (--steps: every case's)
    warmup: int  # steps left out of the steady-state figures


CASES = {
    "digits": Case(
        "max-of-5-digits, untrained (geometric tail)",
        TinyModelConfig(max_seq_len=MAX_TOKENS + 64),
        ("task.num_digits=5",),
        ("--num-digits=5",),
        steps=25,
        warmup=5,
    ),
    "reasoning_gym": Case(
        "reasoning-gym chain_sum, untrained byte model",
        TinyModelConfig(tokenizer="bytes"),
        ("--config-name=reasoning_gym",),
        ("--config-name=reasoning_gym",),
        steps=12,  # ~20x the tokens of a digits step
        warmup=2,
    ),
}
# Throughput alone: no evaluation, no checkpoint (TRL's side does neither)
FORGE_COMMON = (
    f"sampling.max_tokens={MAX_TOKENS}",
    f"trainer.lr={LR}",
    "eval.every_steps=0",
    "checkpoint.every_steps=0",
)


def steady(times: list[float], tokens: list[float], warmup: int) -> dict:
    """Steps/s and completion tokens/s from the console line of step `warmup + 1` to the last
    (times[i]: step i + 1's line, seconds from launch; tokens[i]: its mean completion length)."""
    span = times[-1] - times[warmup]
    trained = sum(tokens[warmup + 1 :]) * COMPLETIONS_PER_STEP
    return {
        "steps_per_s": (len(times) - 1 - warmup) / span,
        "tokens_per_s": trained / span,
        "tokens": trained,
        "length_mean": statistics.fmean(tokens[warmup + 1 :]),
    }


def forge_run(case: Case, checkpoint: Path, steps: int, seed: int, overrides: list[str]) -> dict:
    warmup = case.warmup
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cpu = ProcCpu(run_dir / "procs.json")
        marked_at = {warmup + 1, steps}  # step lines: the first of the steady window (+1: 1-based), the last

        def on_line(line: str) -> None:
            if (match := STEP_LINE.match(line)) and int(match.group(1)) in marked_at:
                cpu.mark()

        args = [*case.forge, f"model.path={checkpoint}", f"seed={seed}", *FORGE_COMMON, *overrides]
        lines = timed_run(REPO, steps, args, run_dir, on_line=on_line)
        metrics, _ = read_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
    times = [t for t, line in lines if STEP_LINE.match(line)]
    rows = metrics[warmup + 1 :]
    first, last = metrics[warmup], metrics[-1]
    idle_s = [m["train/idle_frac"] * m["time/wall_s"] for m in (first, last)]
    result = steady(times, [m["completion/length_mean"] for m in metrics], warmup)
    cpu_s = sum(cpu.cores().values()) * (cpu.marks[-1][0] - cpu.marks[0][0])
    return {
        **result,
        "tokens_per_cpu_s": result["tokens"] / cpu_s,
        "trainer_idle": (idle_s[1] - idle_s[0]) / (last["time/wall_s"] - first["time/wall_s"]),
        "generator_idle": summary["generator_idle_frac"],
        "running_mean": _weighted(rows, "generator/running_mean"),
        "under_half": _weighted(rows, "generator/under_half_frac"),
        "dropped": summary["dropped_stale"] + summary["dropped_other"],
        "cores": cpu.cores(),
        "running_series": ([m["time/wall_s"] for m in metrics], [m["generator/running_mean"] for m in metrics]),
    }


def _weighted(rows: list[dict], key: str) -> float:
    """`key`'s mean over the engine steps of `rows` (each row's value weighs its engine steps)."""
    steps = sum(r["generator/engine_steps"] for r in rows)
    return sum(r[key] * r["generator/engine_steps"] for r in rows) / max(steps, 1)


def trl_run(case: Case, checkpoint: Path, steps: int, seed: int, threads: int) -> dict:
    """`threads`: torch's threads in TRL's process (0: torch's default)."""
    arguments = [
        str(checkpoint),
        *case.trl,
        f"--steps={steps}",
        f"--seed={seed}",
        f"--max-tokens={MAX_TOKENS}",
        f"--lr={LR}",
        *([f"--threads={threads}"] if threads else []),
    ]
    start = time.perf_counter()
    proc = launch_trl(arguments)
    process = psutil.Process(proc.pid)
    times, tokens, cpu_s, tail = [], [], [], []
    for line in proc.stdout:
        tail = (tail + [line])[-30:]
        if match := _TRL_STEP.match(line.strip()):
            times.append(time.perf_counter() - start)
            tokens.append(float(match.group(2)))
            cpu = process.cpu_times()
            cpu_s.append(cpu.user + cpu.system)
    if proc.wait() != 0:
        raise SystemExit("the TRL run failed (is TRL installed? pip install -e '.[bench]'):\n" + "".join(tail))
    result = steady(times, tokens, case.warmup)
    return result | {"tokens_per_cpu_s": result["tokens"] / (cpu_s[-1] - cpu_s[case.warmup])}


def parse_variant(text: str) -> tuple[str, list[str]]:
    label, _, overrides = text.partition("=")
    if not overrides:
        raise SystemExit(f"--variant {text!r}: LABEL=OVERRIDE[,OVERRIDE...]")
    return label, overrides.split(",")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="alternations of every side, seeds 0 .. runs-1")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: each case's, 25 and 12)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {', '.join(CASES)}")
    parser.add_argument("--variant", action="append", default=[], help="LABEL=OVERRIDES: another forge_async side")
    parser.add_argument(
        "--trl-threads", default="0,1", help="TRL sides, by torch threads (0: torch's default, every core)"
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every forge_async side")
    add_json_argument(parser)
    args = parser.parse_args()
    trl_sides = {trl_side(int(n)): int(n) for n in args.trl_threads.split(",")}
    sides = {FORGE: args.overrides} | {label: args.overrides + o for label, o in map(parse_variant, args.variant)}
    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.cases.split(","):
            case = CASES[name]
            steps = args.steps or case.steps
            checkpoint = create_tiny_checkpoint(Path(tmp) / name, case.tiny)
            results[name] = {side: [] for side in [*sides, *trl_sides]}
            for seed in range(args.runs):
                for side in results[name]:
                    if side in trl_sides:
                        r = trl_run(case, checkpoint, steps, seed, trl_sides[side])
                    else:
                        r = forge_run(case, checkpoint, steps, seed, sides[side])
                    results[name][side].append(r)
                    print(f"{name:14} {side:24} seed {seed}: {describe(r)}", flush=True)
    result = result_of(results)
    result.print_summary()
    if args.json:
        result.write(args.json)


def describe(r: dict) -> str:
    text = (
        f"{r['tokens_per_s']:,.0f} tokens/s ({r['tokens_per_cpu_s']:,.0f} per CPU-second), "
        f"{r['steps_per_s']:.2f} steps/s, mean length {r['length_mean']:.1f}"
    )
    if "trainer_idle" in r:
        cores = ", ".join(f"{role} {c:.2f}" for role, c in sorted(r["cores"].items()))
        text += (
            f"; trainer idle {100 * r['trainer_idle']:.0f}%, generator idle {100 * r['generator_idle']:.0f}%, "
            f"running {r['running_mean']:.1f}/step, under half {100 * r['under_half']:.0f}% of engine steps, "
            f"{r['dropped']} dropped; cores: {cores}"
        )
    return text


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


COLUMNS = [
    "case",
    "side",
    "completion tokens/s",
    "x TRL (faster side)",
    "tokens per CPU-second",
    "x TRL per CPU-second",
    "steps/s",
    "mean length",
    "trainer idle %",
    "generator idle %",
    "running / engine step",
    "engine steps under half %",
    "dropped",
    "cores (generator, trainer)",
]


def result_of(results: dict[str, dict[str, list[dict]]]) -> BenchmarkResult:
    """The figures, against the fastest TRL side of each case (the sides named "TRL...")."""
    result = BenchmarkResult("long_tail", "Long-tailed completion lengths against TRL", this_command())
    rows = []
    for case, by_side in results.items():
        trls = [runs for side, runs in by_side.items() if _is_trl(side)]
        trl = max(_median(runs, "tokens_per_s") for runs in trls)
        trl_cpu = max(_median(runs, "tokens_per_cpu_s") for runs in trls)
        for side, runs in by_side.items():
            tokens, per_cpu = _median(runs, "tokens_per_s"), _median(runs, "tokens_per_cpu_s")
            result.figure(f"{case}: {side} completion tokens/s (median)", tokens, "tokens/s")
            if not _is_trl(side):
                result.figure(f"{case}: {side} / TRL's faster side, completion tokens/s", tokens / trl, "x")
                result.figure(f"{case}: {side} / TRL's faster side, tokens per CPU-second", per_cpu / trl_cpu, "x")
            rows.append([case, side, tokens, tokens / trl, per_cpu, per_cpu / trl_cpu])
            rows[-1] += [_median(runs, "steps_per_s"), _median(runs, "length_mean")]
            rows[-1] += _forge_columns(runs) if not _is_trl(side) else [None] * 6
        lines = [Line(side, *runs[0]["running_series"]) for side, runs in by_side.items() if not _is_trl(side)]
        result.series.append(
            Series(f"{case}: engine batch running per engine step", "seconds into the run", "samples running", lines)
        )
    result.tables.append(Table("Each side, steady state (medians over the runs)", COLUMNS, rows))
    return result


def _is_trl(side: str) -> bool:
    return side.startswith("TRL")


def _forge_columns(runs: list[dict]) -> list:
    cores = runs[0]["cores"]
    trainer = sum(c for role, c in cores.items() if role.startswith("trainer"))
    generators = sum(c for role, c in cores.items() if role.startswith("generator"))
    return [
        100 * _median(runs, "trainer_idle"),
        100 * _median(runs, "generator_idle"),
        _median(runs, "running_mean"),
        100 * _median(runs, "under_half"),
        int(_median(runs, "dropped")),
        f"{generators:.2f}, {trainer:.2f}",
    ]


if __name__ == "__main__":
    main()
