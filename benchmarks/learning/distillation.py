"""On-policy distillation vs GRPO from scratch: the same student, the same task, the same box.

    .venv/bin/python -m benchmarks.learning.distillation                    # trains a teacher, seeds 0-2
    .venv/bin/python -m benchmarks.learning.distillation --teacher RUN_DIR/final_model --seeds 5
    .venv/bin/python -m benchmarks.learning.distillation --json PATH        # also the results in the report's shape

A teacher (GRPO, 250 steps, tiny-model seed 0) is trained first unless given. Then for each
seed, the student (a fresh tiny model, seed 1) learns the task twice: by GRPO from scratch,
and by distillation from the teacher (`python -m apps.distill`). Per run: the step and the
seconds from launch at which the 5-step mean task reward first reaches the target, the final
reward (last 10 steps), and for distillation the reverse KL to the teacher, first and last
10 steps; then the medians and the distillation/GRPO ratio of steps.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, launch_to_reward, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows

STUDENT = "model.tiny.seed=1"


def train_teacher(workdir: Path, steps: int) -> Path:
    run_dir = workdir / "teacher"
    print(f"training the teacher: apps.grpo steps={steps} ...", flush=True)
    timed_run(REPO, steps, ["seed=0", "model.tiny.seed=0"], run_dir)
    reward = json.loads((run_dir / "summary.json").read_text())["reward_last"]
    print(f"teacher: reward {reward:.2f} (last 10 steps)", flush=True)
    return run_dir / "final_model"


def one_run(app: str, seed: int, steps: int, target: float, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        lines = timed_run(REPO, steps, [f"seed={seed}", STUDENT, *overrides], run_dir, app=app)
        metrics, _ = read_rows(run_dir)
    reached = launch_to_reward(lines, metrics, target)
    kl = [m["distill/reverse_kl"] for m in metrics if "distill/reverse_kl" in m]
    return {
        "app": app.removeprefix("apps."),
        "seed": seed,
        "step": reached[1] if reached else None,
        "seconds": reached[0] if reached else None,
        "final": statistics.fmean(m["reward/mean"] for m in metrics[-10:]),
        "kl": f"{statistics.fmean(kl[:10]):.2f} -> {statistics.fmean(kl[-10:]):.2f}" if kl else "",
    }


APPS = ("grpo", "distill")
COLUMNS = ("run", "seed", "step", "s", "final")
WIDTHS = (8, 4, 5, 6, 6)


def cells(r: dict) -> list[str]:
    """One run's row, as printed (the reverse KL last)."""
    step = str(r["step"]) if r["step"] is not None else "-"
    seconds = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
    return [r["app"], str(r["seed"]), step, seconds, f"{r['final']:.2f}", r["kl"]]


def line(row: list[str]) -> str:
    return " ".join(cell.rjust(width) for cell, width in zip(row, WIDTHS)) + f"  {row[-1]}"


def reached_by(results: list[dict], app: str) -> list[dict]:
    return [r for r in results if r["app"] == app and r["step"] is not None]


def median_of(runs: list[dict], key: str) -> float | None:
    return statistics.median(r[key] for r in runs) if runs else None


def steps_ratio(results: list[dict]) -> float | None:
    """Distillation's median steps to the target over GRPO's; None unless both reach it."""
    grpo, distill = (median_of(reached_by(results, app), "step") for app in APPS)
    return distill / grpo if grpo and distill else None


def result_of(results: list[dict], seeds: int, target: float) -> BenchmarkResult:
    result = BenchmarkResult("distillation", "On-policy distillation vs GRPO from scratch", this_command())
    if (ratio := steps_ratio(results)) is not None:
        result.figure(f"distillation / GRPO steps to reward {target}", ratio, "x")
    for app in APPS:
        reached = reached_by(results, app)
        result.figure(f"{app}: seeds reaching {target}", len(reached), f"of {seeds}")
        if reached:
            result.figure(f"{app}: median steps to {target}", median_of(reached, "step"), "steps")
            result.figure(f"{app}: median seconds from launch to {target}", median_of(reached, "seconds"), "s")
    columns = [*COLUMNS, "reverse KL (first -> last 10 steps)"]
    result.tables.append(
        Table(
            f"Per run: the first step whose 5-step mean reward reaches {target}", columns, [cells(r) for r in results]
        )
    )
    by_seed = {(r["app"], r["seed"]): r for r in results}
    both = [seed for seed in range(seeds) if all(by_seed[(app, seed)]["step"] is not None for app in APPS)]
    if both:
        lines = [
            Line(app, [f"seed {seed}" for seed in both], [by_seed[(app, seed)]["step"] for seed in both])
            for app in APPS
        ]
        result.series.append(
            Series(f"Steps to reward {target}, seeds where both reach it", "", "steps", lines, bars=True)
        )
    lines = [
        Line(app, [f"seed {seed}" for seed in range(seeds)], [by_seed[(app, seed)]["final"] for seed in range(seeds)])
        for app in APPS
    ]
    result.series.append(Series("Final reward (last 10 steps)", "", "reward", lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", help="a teacher checkpoint; default: train one first")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--target", type=float, default=0.8)
    add_json_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        teacher = args.teacher or str(train_teacher(Path(workdir), 250))
        print(line([*COLUMNS, "reverse KL"]), flush=True)
        results = []
        for seed in range(args.seeds):
            for app, overrides in (("apps.grpo", []), ("apps.distill", [f"teacher.path={teacher}"])):
                results.append(one_run(app, seed, args.steps, args.target, overrides))
                print(line(cells(results[-1])), flush=True)
    for app in APPS:
        reached = reached_by(results, app)
        print(
            f"{app}: {len(reached)}/{args.seeds} reach {args.target}; median step {median_of(reached, 'step')}, "
            f"median seconds from launch {median_of(reached, 'seconds')}"
        )
    if (ratio := steps_ratio(results)) is not None:
        print(f"distillation needs {ratio:.2f}x the steps of GRPO from scratch")
    if args.json:
        result_of(results, args.seeds, args.target).write(args.json)


if __name__ == "__main__":
    main()
