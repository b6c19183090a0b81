"""Async vs sync GRPO on the same config and number of steps, in one run.

Prints wall time, samples/s, trainer and generator idle fractions, the async
speedup, and each mode's time to the target reward.

    .venv/bin/python -m benchmarks.sync_vs_async            # the default config
    .venv/bin/python -m benchmarks.sync_vs_async --steps 40 -- trainer.procs=2
"""

import argparse
import tempfile
from pathlib import Path

from apps.grpo.subprocess_run import run_app


def time_to_target(summary: dict) -> str:
    reached = summary["target_reached"]
    return f"{reached['wall_s']:.0f}s (step {reached['step']})" if reached else "not reached"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default: the config's own")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = parser.parse_args()
    summaries = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("sync", "async"):
            steps = [f"steps={args.steps}"] if args.steps else []
            print(f"running mode={mode} {' '.join(steps + args.overrides)} ...", flush=True)
            run = run_app(Path(tmp) / mode, f"mode={mode}", *steps, *args.overrides, timeout=3600)
            if run.returncode != 0:
                raise SystemExit(f"mode={mode} failed:\n{run.output[-3000:]}")
            summaries[mode] = run.summary
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


if __name__ == "__main__":
    main()
