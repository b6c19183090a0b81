"""The three generator.swap_mode values on long-completion GRPO runs, in one invocation.

Runs `python -m apps.grpo --config-name grpo_long` (copy_digits) once per mode and
round, with `--digits`-token completions, the modes taking turns. Prints per mode:
the swaps made with requests running and their generation pause (mean / max),
samples and completion tokens trained per second, the largest version spread
within one completion, the reward at the end, and for abort_resume the requests
re-submitted with their prefix and the prefix tokens prefilled again. On a shared
box another job's load can slow a run many times over, so each mode's column is
its fastest run (every run's wall time is printed as it ends). With --json, the same in the
report's shape (benchmarks/harness/results.py).

    .venv/bin/python -m benchmarks.components.swap_modes                      # 128-token completions, 8 steps, 2 rounds
    .venv/bin/python -m benchmarks.components.swap_modes --rounds 3 --steps 20 -- seed=1
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from forge_async.cli.subprocess_run import AppRun, run_app
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command

MODES = ("inflight", "drain", "abort_resume")
# (label, format) of each figure, in the order printed
FIGURES = {
    "swaps": ("swaps with requests running", "{:.0f}"),
    "pause_mean": ("swap pause mean (ms)", "{:.1f}"),
    "pause_max": ("swap pause max (ms)", "{:.1f}"),
    "wall_s": ("wall time (s)", "{:.1f}"),
    "samples_per_s": ("samples trained/s", "{:.2f}"),
    "tokens_per_s": ("completion tokens/s", "{:.0f}"),
    "spread_max": ("max version spread", "{:.0f}"),
    "spread_steps": ("steps with spread > 0", "{:.0f}"),
    "reward_last": ("reward_last (summary.json)", "{:.3f}"),
    "resumed": ("resumed requests", "{:.0f}"),
    "prefix_tokens": ("re-prefilled prefix tokens", "{:.0f}"),
}


def long_completions(digits: int) -> list[str]:
    """grpo_long's overrides for `digits`-digit copies: completions of `digits` tokens + EOS."""
    return [
        "--config-name=grpo_long",
        f"task.num_digits={digits}",
        f"sampling.max_tokens={digits + 2}",
        f"sampling.min_tokens={digits}",
        f"model.tiny.max_seq_len={2 * digits + 16}",
    ]


def figures(run: AppRun) -> dict[str, float | None]:
    summary, metrics = run.summary, run.metrics
    length = statistics.fmean(m["completion/length_mean"] for m in metrics)
    return {
        "swaps": summary["inflight_swaps"],
        "pause_mean": summary["swap_pause_ms_mean"],
        "pause_max": summary["swap_pause_ms_max"],
        "wall_s": summary["wall_s"],
        "samples_per_s": summary["samples_per_s"],
        "tokens_per_s": summary["samples_per_s"] * length,
        "spread_max": max(m["policy/version_spread_max"] for m in metrics),
        "spread_steps": sum(m["policy/version_spread_max"] > 0 for m in metrics),
        "reward_last": summary["reward_last"],
        "resumed": summary["resumed_requests"],
        "prefix_tokens": summary["resumed_prefix_tokens"],
    }


def shown(run: dict, key: str) -> str:
    return "-" if run[key] is None else FIGURES[key][1].format(run[key])


def result_of(runs: dict[str, list[dict]], fastest: dict[str, dict]) -> BenchmarkResult:
    result = BenchmarkResult("swap_modes", "Swap modes on long completions", this_command())
    for mode, run in fastest.items():
        result.figure(f"{mode}: completion tokens/s (fastest run)", run["tokens_per_s"], "tokens/s")
        if run["swaps"] and run["pause_mean"] is not None:
            result.figure(f"{mode}: swap pause mean (fastest run)", run["pause_mean"], "ms")
    rows = [[label, *(shown(fastest[mode], key) for mode in MODES)] for key, (label, _) in FIGURES.items()]
    result.tables.append(Table("Each mode's fastest run", ["", *MODES], rows))
    every = [
        [round_, mode, run["wall_s"], run["tokens_per_s"]] for mode in MODES for round_, run in enumerate(runs[mode])
    ]
    result.tables.append(Table("Every run", ["round", "mode", "wall time (s)", "completion tokens/s"], every))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="runs per mode, the modes taking turns")
    parser.add_argument("--digits", type=int, default=128, help="completion length (tokens, + EOS)")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for mode in MODES:
                overrides = [*long_completions(args.digits), f"steps={args.steps}", f"generator.swap_mode={mode}"]
                print(f"round {round_}: {' '.join(overrides + args.overrides)} ...", flush=True)
                run = run_app(Path(tmp) / f"{mode}{round_}", *overrides, *args.overrides, timeout=3600)
                if run.returncode != 0:
                    raise SystemExit(f"swap_mode={mode} failed:\n{run.output[-3000:]}")
                runs[mode].append(figures(run))
                print(
                    f"  wall {runs[mode][-1]['wall_s']:.1f}s, {runs[mode][-1]['tokens_per_s']:.0f} tokens/s", flush=True
                )
    fastest = {mode: min(runs[mode], key=lambda run: run["wall_s"]) for mode in MODES}
    print(f"\n{'':30}" + "".join(f"{mode:>14}" for mode in MODES))
    for key, (label, _) in FIGURES.items():
        print(f"{label:30}" + "".join(f"{shown(fastest[mode], key):>14}" for mode in MODES))
    if args.json:
        result_of(runs, fastest).write(args.json)


if __name__ == "__main__":
    main()
