"""On-policy distillation vs GRPO from scratch: the same student, the same task, the same box.

    .venv/bin/python -m benchmarks.distillation                    # trains a teacher, seeds 0-2
    .venv/bin/python -m benchmarks.distillation --teacher RUN_DIR/final_model --seeds 5

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

from benchmarks.pipeline import launch_to_reward
from benchmarks.startup import timed_run
from forge_async.metrics import read_rows

REPO = Path(__file__).resolve().parent.parent
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", help="a teacher checkpoint; default: train one first")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--target", type=float, default=0.8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        teacher = args.teacher or str(train_teacher(Path(workdir), 250))
        print(f"{'run':>8} {'seed':>4} {'step':>5} {'s':>6} {'final':>6}  reverse KL", flush=True)
        results = []
        for seed in range(args.seeds):
            for app, overrides in (("apps.grpo", []), ("apps.distill", [f"teacher.path={teacher}"])):
                r = one_run(app, seed, args.steps, args.target, overrides)
                results.append(r)
                step = r["step"] if r["step"] is not None else "-"
                seconds = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
                print(f"{r['app']:>8} {seed:>4} {step:>5} {seconds:>6} {r['final']:>6.2f}  {r['kl']}", flush=True)
    medians = {}
    for app in ("grpo", "distill"):
        reached = [r for r in results if r["app"] == app and r["step"] is not None]
        medians[app] = statistics.median(r["step"] for r in reached) if reached else None
        seconds = statistics.median(r["seconds"] for r in reached) if reached else None
        print(f"{app}: {len(reached)}/{args.seeds} reach {args.target}; median step {medians[app]}, "
              f"median seconds from launch {seconds}")
    if medians["grpo"] and medians["distill"]:
        print(f"distillation needs {medians['distill'] / medians['grpo']:.2f}x the steps of GRPO from scratch")


if __name__ == "__main__":
    main()
