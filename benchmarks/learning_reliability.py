"""Does every seed learn? The default config over N seeds, async and sync, one after another.

    .venv/bin/python -m benchmarks.learning_reliability                 # seeds 0-4, both modes
    .venv/bin/python -m benchmarks.learning_reliability --seeds 3 --modes async \\
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

from benchmarks.pipeline import launch_to_reward
from benchmarks.startup import timed_run
from forge_async.metrics import read_rows

REPO = Path(__file__).resolve().parent.parent


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
    return f"median {fmt.format(statistics.median(values))} (min {fmt.format(min(values))}, max {fmt.format(max(values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1")
    parser.add_argument("--modes", nargs="+", default=["async", "sync"], choices=["async", "sync"])
    parser.add_argument("--steps", type=int, default=400, help="the default config's")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = parser.parse_args()
    print(
        f"{'mode':>5} {'seed':>4} {'step':>5} {'s':>6} {'final':>6} {'eval':>5} {'entropy':>7} "
        f"{'age':>4} {'stale':>6} {'other':>6}"
    )
    results = []
    for mode in args.modes:
        for seed in range(args.seeds):
            r = one_run(mode, seed, args.steps, args.target, args.overrides)
            results.append(r)
            step = r["step"] if r["step"] is not None else "-"
            seconds = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
            evaluated = f"{r['eval']:.2f}" if r["eval"] is not None else "-"
            print(
                f"{mode:>5} {seed:>4} {step:>5} {seconds:>6} {r['final']:>6.2f} {evaluated:>5} {r['entropy']:>7.3f} "
                f"{r['age_max']:>4} {r['dropped_stale']:>6} {r['dropped_other']:>6} {r['other_reasons'] or ''}",
                flush=True,
            )
    for mode in args.modes:
        runs = [r for r in results if r["mode"] == mode]
        reached = [r for r in runs if r["step"] is not None]
        print(
            f"{mode}: {len(reached)}/{len(runs)} reach {args.target}; steps {_spread([r['step'] for r in reached], '{:.0f}')}; "
            f"seconds from launch {_spread([r['seconds'] for r in reached], '{:.1f}')}; "
            f"final {_spread([r['final'] for r in runs], '{:.2f}')}"
        )


if __name__ == "__main__":
    main()
