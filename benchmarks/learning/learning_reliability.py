"""Does every seed learn? The default config over N seeds, async and sync, one after another.

    .venv/bin/python -m benchmarks.learning.learning_reliability                 # seeds 0-4, both modes
    .venv/bin/python -m benchmarks.learning.learning_reliability --json PATH     # also the results in the report's shape
    .venv/bin/python -m benchmarks.learning.learning_reliability --seeds 3 --modes async \\
        -- filter.zero_variance_groups=true

Per run: the step and the seconds from launch at which the 5-step moving-average reward
first reaches the target (0.8), the final reward (mean of the last 10 steps), the last
held-out evaluation's mean reward, the final entropy of the sampled tokens (mean of the
last 10 steps; near 0 = collapsed), the largest policy age, and the dropped samples (stale;
other, e.g. zero-variance groups, with their reasons). Then per mode the median and the spread (min-max) of
steps and seconds to the target.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, launch_to_reward, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows


def one_run(mode: str, seed: int, steps: int, target: float, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        lines = timed_run(REPO, steps, [f"mode={mode}", f"seed={seed}", *overrides], run_dir)
        metrics, evaluations = read_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
    reached = launch_to_reward(lines, metrics, target)
    return {
        "mode": mode,
        "seed": seed,
        "step": reached[1] if reached else None,
        "seconds": reached[0] if reached else None,
        "final": statistics.fmean(m["reward/mean"] for m in metrics[-10:]),
        "entropy": statistics.fmean(m["train/entropy"] for m in metrics[-10:]),
        "eval": evaluations[-1]["eval/reward_mean"] if evaluations else None,
        "age_max": max(m["policy/age_max"] for m in metrics),
        "dropped_stale": summary["dropped_stale"],
        "dropped_other": summary["dropped_other"],
        "other_reasons": {k: v for k, v in summary["dropped_by_reason"].items() if k != "stale"},
    }


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "none reached"
    return (
        f"median {fmt.format(statistics.median(values))} (min {fmt.format(min(values))}, max {fmt.format(max(values))})"
    )


COLUMNS = ("mode", "seed", "step", "s", "final", "eval", "entropy", "age", "stale", "other")
WIDTHS = (5, 4, 5, 6, 6, 5, 7, 4, 6, 6)


def cells(r: dict) -> list[str]:
    """One run's row, as printed (the other drops' reasons last)."""
    return [
        r["mode"],
        str(r["seed"]),
        str(r["step"]) if r["step"] is not None else "-",
        f"{r['seconds']:.1f}" if r["seconds"] is not None else "-",
        f"{r['final']:.2f}",
        f"{r['eval']:.2f}" if r["eval"] is not None else "-",
        f"{r['entropy']:.3f}",
        str(r["age_max"]),
        str(r["dropped_stale"]),
        str(r["dropped_other"]),
        str(r["other_reasons"] or ""),
    ]


def aligned(row: list[str]) -> str:
    return " ".join(cell.rjust(width) for cell, width in zip(row, WIDTHS))


def of_mode(results: list[dict], mode: str) -> tuple[list[dict], list[dict]]:
    """A mode's runs, and those of them that reach the target."""
    runs = [r for r in results if r["mode"] == mode]
    return runs, [r for r in runs if r["step"] is not None]


def mode_cells(results: list[dict], mode: str) -> list[str]:
    """A mode's summary, as printed: runs reaching the target; spreads of steps, seconds, final reward."""
    runs, reached = of_mode(results, mode)
    return [
        mode,
        f"{len(reached)}/{len(runs)}",
        _spread([r["step"] for r in reached], "{:.0f}"),
        _spread([r["seconds"] for r in reached], "{:.1f}"),
        _spread([r["final"] for r in runs], "{:.2f}"),
    ]


def result_of(results: list[dict], modes: list[str], seeds: int, target: float) -> BenchmarkResult:
    result = BenchmarkResult("learning_reliability", "Learning reliability", this_command())
    seconds = {}
    for mode in modes:
        runs, reached = of_mode(results, mode)
        result.figure(f"{mode}: seeds reaching {target}", len(reached), f"of {seeds}")
        if reached:
            seconds[mode] = statistics.median(r["seconds"] for r in reached)
            result.figure(f"{mode}: median steps to {target}", statistics.median(r["step"] for r in reached), "steps")
            result.figure(f"{mode}: median seconds from launch to {target}", seconds[mode], "s")
        result.figure(f"{mode}: median final reward", statistics.median(r["final"] for r in runs), "")
    if "async" in seconds and "sync" in seconds:
        result.figure(f"async / sync median seconds from launch to {target}", seconds["async"] / seconds["sync"], "x")
    columns = ["mode", "runs reaching", "steps", "seconds from launch", "final reward"]
    result.tables.append(
        Table(f"Per mode: runs reaching {target}, and spreads", columns, [mode_cells(results, m) for m in modes])
    )
    result.tables.append(
        Table(
            f"Per run: the first step whose 5-step mean reward reaches {target}",
            [*COLUMNS, "other reasons"],
            [cells(r) for r in results],
        )
    )
    by_run = {(r["mode"], r["seed"]): r for r in results}
    every = [seed for seed in range(seeds) if all(by_run[(mode, seed)]["step"] is not None for mode in modes)]
    for title, y_label, key, seeds_shown in (
        (f"Steps to reward {target}, seeds where every mode reaches it", "steps", "step", every),
        ("Final reward (last 10 steps)", "reward", "final", range(seeds)),
    ):
        if seeds_shown:
            names = [f"seed {seed}" for seed in seeds_shown]
            lines = [Line(mode, names, [by_run[(mode, seed)][key] for seed in seeds_shown]) for mode in modes]
            result.series.append(Series(title, "", y_label, lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1")
    parser.add_argument("--modes", nargs="+", default=["async", "sync"], choices=["async", "sync"])
    parser.add_argument("--steps", type=int, default=400, help="the default config's")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    print(aligned(list(COLUMNS)))
    results = []
    for mode in args.modes:
        for seed in range(args.seeds):
            results.append(one_run(mode, seed, args.steps, args.target, args.overrides))
            row = cells(results[-1])
            print(aligned(row) + f" {row[-1]}", flush=True)
    for mode in args.modes:
        _, reaching, steps, seconds, final = mode_cells(results, mode)
        print(f"{mode}: {reaching} reach {args.target}; steps {steps}; seconds from launch {seconds}; final {final}")
    if args.json:
        result_of(results, args.modes, args.seeds, args.target).write(args.json)


if __name__ == "__main__":
    main()
