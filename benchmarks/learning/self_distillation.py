"""Self-distillation against a lagged teacher vs GRPO alone: the CPU default, the same steps.

    .venv/bin/python -m benchmarks.learning.self_distillation                 # seeds 0-2, 200 steps, coef 0.1 1 10
    .venv/bin/python -m benchmarks.learning.self_distillation --lag 5 --refresh-steps 10 --coef 1
    .venv/bin/python -m benchmarks.learning.self_distillation --json PATH     # also the results in the report's shape

Per seed, `python -m apps.grpo` (the default task and model) runs GRPO alone (the default's
scorers: the task reward and the reference KL in the trainer), then once per --coef GRPO plus a
teacher that is the policy itself --lag steps before each refresh, refreshed every
--refresh-steps steps (the default's scorers and `{kind: teacher, model: self, ...}`; its
per-token advantage coef * (log pi_teacher - log pi_student) is added to GRPO's). Per run: the
step and the seconds from launch at which the 5-step mean reward first reaches the target, the
reward of the last 10 steps, and for a teacher arm the reverse KL to the teacher: its mean over
the first and the last 10 steps, and its largest 10-step mean (it peaks while the reward
climbs); then the medians and, per coef, the ratio of steps (teacher / GRPO alone); the reward
and the reverse KL over steps (medians over seeds).
"""

import argparse
import statistics
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from benchmarks.harness.app_run import REPO, launch_to_reward, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.controller.config import GRPOConfig
from forge_async.observability.metrics import read_rows
from forge_async.scoring.config import ScorerConfig

ALONE = "grpo"
WINDOW = 5  # the moving mean of the reward the target is read on (harness/app_run.py's)


def hydra_entry(scorer: ScorerConfig) -> str:
    """One scorer as a Hydra list entry: its kind, and the keys where it differs from a bare ScorerConfig."""
    bare = ScorerConfig()
    changed = [f.name for f in fields(scorer) if f.name != "kind" and getattr(scorer, f.name) != getattr(bare, f.name)]
    return "{" + ",".join(f"{name}:{getattr(scorer, name)}" for name in ["kind", *changed]) + "}"


def scorers_with_teacher(lag: int, refresh_steps: int, coef: float) -> str:
    """The default's scorers (read from the schema, so the reference KL stays as it is) plus the self teacher."""
    teacher = ScorerConfig(kind="teacher", model="self", lag=lag, refresh_steps=refresh_steps, coef=coef)
    return "scorers=[" + ",".join(hydra_entry(s) for s in [*GRPOConfig().scorers, teacher]) + "]"


@dataclass
class Run:
    arm: str
    seed: int
    rewards: list[float]  # reward/mean per step
    reverse_kl: list[float]  # distill/reverse_kl per step; empty for GRPO alone
    step: int | None  # the first step whose 5-step mean reward reaches the target
    seconds: float | None  # ... and its seconds from launch

    @property
    def final(self) -> float:
        return statistics.fmean(self.rewards[-10:])


def one_run(arm: str, seed: int, steps: int, target: float, overrides: list[str]) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        lines = timed_run(REPO, steps, [f"seed={seed}", *overrides], run_dir)
        metrics, _ = read_rows(run_dir)
    reached = launch_to_reward(lines, metrics, target)
    return Run(
        arm,
        seed,
        [m["reward/mean"] for m in metrics],
        [m["distill/reverse_kl"] for m in metrics if "distill/reverse_kl" in m],
        reached[1] if reached else None,
        reached[0] if reached else None,
    )


def kl_parts(kl: list[float]) -> dict[str, float]:
    """The reverse KL's mean over the first and the last 10 steps, and its largest 10-step mean (mid-learning)."""
    means = [statistics.fmean(kl[i : i + 10]) for i in range(len(kl) - 9)]
    return {"first": means[0], "largest": max(means), "last": means[-1]}


def kl_cell(run: Run) -> str:
    if not run.reverse_kl:
        return ""
    parts = kl_parts(run.reverse_kl)
    return f"{parts['first']:.3f} -> {parts['last']:.3f} (largest {parts['largest']:.3f})"


def cells(run: Run) -> list[str]:
    step = str(run.step) if run.step is not None else "-"
    seconds = f"{run.seconds:.0f}" if run.seconds is not None else "-"
    return [run.arm, str(run.seed), step, seconds, f"{run.final:.2f}", kl_cell(run)]


COLUMNS = ["arm", "seed", "step", "s", "final", "reverse KL, 10-step means: first -> last (largest)"]


def arms_of(args: argparse.Namespace) -> dict[str, list[str]]:
    """Arm name -> its overrides: GRPO alone first, then GRPO plus the teacher at each coef."""
    taught = {f"grpo+self {coef:g}": [scorers_with_teacher(args.lag, args.refresh_steps, coef)] for coef in args.coef}
    return {ALONE: [], **taught}


def median_of(runs: list[Run], arm: str, key: str) -> float | None:
    values = [getattr(r, key) for r in runs if r.arm == arm and getattr(r, key) is not None]
    return statistics.median(values) if values else None


def steps_ratio(runs: list[Run], arm: str) -> float | None:
    """A teacher arm's median steps to the target over GRPO alone's; None unless both reach it."""
    alone, taught = median_of(runs, ALONE, "step"), median_of(runs, arm, "step")
    return taught / alone if alone and taught else None


def moving_mean(values: list[float]) -> list[float]:
    return [statistics.fmean(values[max(0, i - WINDOW + 1) : i + 1]) for i in range(len(values))]


def median_line(label: str, series: list[list[float]]) -> Line:
    """The median over seeds at each step, steps counted from 1."""
    y = [round(statistics.median(at), 4) for at in zip(*series)]
    return Line(label, list(range(1, len(y) + 1)), y)


def series_of(runs: list[Run], arms: list[str]) -> list[Series]:
    """Per arm, the 5-step mean reward over steps and the reverse KL to the teacher over steps (medians over seeds)."""
    reward = [median_line(arm, [moving_mean(r.rewards) for r in runs if r.arm == arm]) for arm in arms]
    kl = [median_line(arm, [r.reverse_kl for r in runs if r.arm == arm]) for arm in arms if arm != ALONE]
    return [
        Series(f"Reward over steps ({WINDOW}-step mean, median over seeds)", "step", "reward", reward),
        Series("Reverse KL to the lagged teacher over steps (median over seeds)", "step", "nats per token", kl),
    ]


def arm_figures(result: BenchmarkResult, runs: list[Run], arm: str, args: argparse.Namespace) -> None:
    if arm != ALONE and (ratio := steps_ratio(runs, arm)) is not None:
        result.figure(f"{arm} / {ALONE} steps to reward {args.target}", ratio, "x")
    reached = [r for r in runs if r.arm == arm and r.step is not None]
    result.figure(f"{arm}: seeds reaching {args.target}", len(reached), f"of {args.seeds}")
    if reached:
        result.figure(f"{arm}: median steps to {args.target}", median_of(runs, arm, "step"), "steps")
        result.figure(f"{arm}: median seconds from launch to {args.target}", median_of(runs, arm, "seconds"), "s")
    result.figure(f"{arm}: median reward, last 10 steps", median_of(runs, arm, "final"), "")
    taught = [r for r in runs if r.arm == arm and r.reverse_kl]
    for part in ("first", "largest", "last"):
        if taught:
            value = statistics.median(kl_parts(r.reverse_kl)[part] for r in taught)
            result.figure(f"{arm}: median reverse KL to the teacher, {part} 10-step mean", value, "")


def result_of(runs: list[Run], arms: list[str], args: argparse.Namespace) -> BenchmarkResult:
    title = "Self-distillation against a lagged teacher vs GRPO alone"
    result = BenchmarkResult("self_distillation", title, this_command())
    for arm in arms:
        arm_figures(result, runs, arm, args)
    heading = f"Per run: the first step whose {WINDOW}-step mean reward reaches {args.target}, its seconds from launch"
    result.tables.append(Table(heading, COLUMNS, [cells(r) for r in runs]))
    result.series.extend(series_of(runs, arms))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--lag", type=int, default=5, help="the teacher: the policy this many steps before a refresh")
    parser.add_argument("--refresh-steps", type=int, default=10, help="the teacher is refreshed every this many steps")
    parser.add_argument(
        "--coef", type=float, nargs="+", default=[0.1, 1.0, 10.0], help="scales of the teacher's per-token advantage"
    )
    add_json_argument(parser)
    args = parser.parse_args()
    arms = arms_of(args)
    print(" | ".join(COLUMNS), flush=True)
    runs = []
    for seed in range(args.seeds):
        for arm, overrides in arms.items():
            runs.append(one_run(arm, seed, args.steps, args.target, overrides))
            print(" | ".join(cells(runs[-1])), flush=True)
    result = result_of(runs, list(arms), args)
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
