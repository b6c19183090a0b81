"""Samples wasted (dropped stale / generated) with and without admission control, in one run.

Runs the GRPO app for the same number of steps at max_policy_age 0, 1 and 4,
with admission control on and off, and prints the waste, throughput and
trainer idle time of each.

    .venv/bin/python -m benchmarks.admission_waste [--steps 30] [-- extra overrides]
"""

import argparse
import tempfile
from pathlib import Path

from apps.grpo.subprocess_run import run_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ages", type=int, nargs="+", default=[0, 1, 4])
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(f"{'max_age':>7} {'admission':>9} {'generated':>9} {'dropped':>8} {'wasted':>7} "
          f"{'samples/s':>9} {'trainer idle':>12} {'gen paused':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for age in args.ages:
            for admission in ("true", "false"):
                run = run_app(
                    Path(tmp) / f"{age}-{admission}", f"steps={args.steps}", f"max_policy_age={age}",
                    f"admission_control={admission}", *args.overrides, timeout=1800,
                )
                if run.returncode != 0:
                    raise SystemExit(run.output[-3000:])
                s = run.summary
                wasted = s["dropped_stale"] / s["generated"]
                print(
                    f"{age:>7} {admission:>9} {s['generated']:>9} {s['dropped_stale']:>8} {wasted:>7.1%} "
                    f"{s['samples_per_s']:>9.0f} {s['trainer_idle_frac']:>12.0%} "
                    f"{s['gen_paused_for_admission_s']:>9.1f}s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
