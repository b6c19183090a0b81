"""Async vs sync GRPO on the same config and number of steps, in one run.

Prints wall time, samples/s, trainer and generator idle fractions, the async
speedup, and each mode's time to the target reward; with --json, also steps/s and
reward over each run (benchmarks/harness/results.py).

    .venv/bin/python -m benchmarks.pipeline.sync_vs_async            # the default config
    .venv/bin/python -m benchmarks.pipeline.sync_vs_async --steps 40 -- trainer.procs=2
"""

import argparse
import tempfile
from pathlib import Path

from forge_async.cli.subprocess_run import run_app
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command

RATE_WINDOW = 20  # steps per point of the steps/s curve


def time_to_target(summary: dict) -> str:
    reached = summary["target_reached"]
    return f"{reached['wall_s']:.0f}s (step {reached['step']})" if reached else "not reached"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default: the config's own")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    add_json_argument(parser)
    args = parser.parse_args()
    summaries, metrics = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("sync", "async"):
            steps = [f"steps={args.steps}"] if args.steps else []
            print(f"running mode={mode} {' '.join(steps + args.overrides)} ...", flush=True)
            run = run_app(Path(tmp) / mode, f"mode={mode}", *steps, *args.overrides, timeout=3600)
            if run.returncode != 0:
                raise SystemExit(f"mode={mode} failed:\n{run.output[-3000:]}")
            summaries[mode], metrics[mode] = run.summary, run.metrics
    print(f"\n{'':22}{'sync':>14}{'async':>14}")
    rows = [
        ("wall time (s)", "wall_s", "{:.1f}"),
        ("samples trained/s", "samples_per_s", "{:.1f}"),
        ("trainer idle", "trainer_idle_frac", "{:.0%}"),
        ("generator idle", "generator_idle_frac", "{:.0%}"),
        ("final reward", "reward_last", "{:.2f}"),
        ("dropped stale", "dropped_stale", "{}"),
    ]
    for label, key, fmt in rows:
        print(f"{label:22}" + "".join(f"{fmt.format(summaries[m][key]):>14}" for m in ("sync", "async")))
    print(f"{'time to target':22}" + "".join(f"{time_to_target(summaries[m]):>14}" for m in ("sync", "async")))
    speedup = summaries["sync"]["wall_s"] / summaries["async"]["wall_s"]
    print(f"\nasync speedup (sync wall / async wall, same steps): {speedup:.2f}x")
    if args.json:
        result_of(summaries, metrics, rows, speedup).write(args.json)


def result_of(summaries: dict, metrics: dict, rows: list, speedup: float) -> BenchmarkResult:
    modes = ("sync", "async")
    result = BenchmarkResult("sync_vs_async", "Sync vs async GRPO", this_command())
    result.figure("async speedup (same steps)", speedup, "x")
    for mode in modes:
        result.figure(f"{mode} samples trained/s", summaries[mode]["samples_per_s"], "samples/s")
    table = [[label] + [fmt.format(summaries[m][key]) for m in modes] for label, key, fmt in rows]
    table.append(["time to target"] + [time_to_target(summaries[m]) for m in modes])
    result.tables.append(Table("Both runs", ["", *modes], table))
    result.series.append(
        Series("Steps/s over the run", "step", "steps/s", [Line(m, *step_rate(metrics[m])) for m in modes])
    )
    result.series.append(
        Series(
            "Reward against wall time",
            "wall time (s)",
            "reward (mean over batch)",
            [Line(m, [r["time/wall_s"] for r in metrics[m]], [r["reward/mean"] for r in metrics[m]]) for m in modes],
        )
    )
    return result


def step_rate(rows: list[dict]) -> tuple[list[float], list[float]]:
    """(step, steps/s over the RATE_WINDOW steps before it) along a run."""
    points = [
        (rows[i]["step"], RATE_WINDOW / (rows[i]["time/wall_s"] - rows[i - RATE_WINDOW]["time/wall_s"]))
        for i in range(RATE_WINDOW, len(rows), RATE_WINDOW)
    ]
    return [p[0] for p in points], [p[1] for p in points]


if __name__ == "__main__":
    main()
