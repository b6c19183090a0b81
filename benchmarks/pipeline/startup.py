"""Start-up and teardown of `python -m apps.grpo`, from outside, as a user sees them.

    python -m benchmarks.pipeline.startup [--runs 3] [--steps 20] [--repo PATH] [-- overrides ...]

Runs the app `--runs` times (after one warm-up run that fills the OS file cache) and
timestamps every console line against the launch. Prints, per run and as medians:
launch -> start-up phases (the app's own `[ t.ts] ...` lines) -> first training step,
and last step -> final save -> report -> process exit. `--repo` points at another
checkout (e.g. an older commit in a git worktree) to measure it the same way. With --json,
the same in the report's shape (benchmarks/harness/results.py).
"""

import argparse
import re
import statistics
from pathlib import Path

from benchmarks.harness.app_run import REPO, STEP_LINE, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command

_MODEL = re.compile(r"(^|\] )model[: ]")

# (label, how to recognise the line that ends the phase); phases missing from a run are skipped.
MILESTONES = (
    ("run dir printed", lambda line: line.startswith("run dir:")),
    ("model ready", lambda line: _MODEL.search(line) is not None),
    ("meshes up", lambda line: "meshes up" in line),
    ("first step", lambda line: STEP_LINE.match(line) is not None),
)


def phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds since launch of each start-up milestone, and the teardown intervals."""
    found = {}
    for label, matches in MILESTONES:
        hit = next((t for t, line in lines if matches(line)), None)
        if hit is not None:
            found[label] = hit
    last_step = max(t for t, line in lines if STEP_LINE.match(line))
    saving = next(t for t, line in lines if line.startswith("saving the final policy"))
    saved = next((t for t, line in lines if line.startswith("final policy saved")), None)
    report = next(t for t, line in lines if line.startswith("== "))
    exit_at = lines[-1][0]
    found["last step -> final save starts"] = saving - last_step
    if saved is not None:  # older versions do not print it: the save and the teardown together
        found["final save"] = saved - saving
        found["final save done -> report"] = report - saved
    else:
        found["final save + teardown -> report"] = report - saving
    found["report -> exit"] = exit_at - report
    found["last step -> exit"] = exit_at - last_step
    found["last step -> exit, less the final save"] = exit_at - last_step - (saved - saving if saved else 0)
    return found


HEADLINES = ("model ready", "first step", "last step -> exit, less the final save")  # the figures of --json


def medians(results: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the runs that have it."""
    return {key: statistics.median(r[key] for r in results if key in r) for key in results[0]}


def kind(phase: str) -> str:
    return "since launch" if phase in dict(MILESTONES) else "interval"


def result_of(results: list[dict[str, float]], median: dict[str, float]) -> BenchmarkResult:
    result = BenchmarkResult("startup", "Start-up and teardown", this_command())
    for phase in HEADLINES:
        if phase in median:
            name = f"launch -> {phase}" if kind(phase) == "since launch" else phase
            result.figure(f"{name} (median)", median[phase], "s")
    columns = ["phase", "kind", *(f"run {i + 1} (s)" for i in range(len(results))), "median (s)"]
    rows = [[phase, kind(phase), *(r.get(phase) for r in results), value] for phase, value in median.items()]
    result.tables.append(Table(f"Start-up and teardown, {len(results)} runs", columns, rows))
    milestones = [label for label, _ in MILESTONES if label in median]
    line = Line("median", milestones, [median[label] for label in milestones])
    result.series.append(Series("Start-up milestones", "", "seconds since launch (median)", [line], bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("overrides", nargs="*")
    add_json_argument(parser)
    args = parser.parse_args()
    print(f"warm-up run ({args.repo}) ...", flush=True)
    timed_run(args.repo, args.steps, args.overrides)
    results = []
    for i in range(args.runs):
        results.append(phases(timed_run(args.repo, args.steps, args.overrides)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}s" for k, v in results[-1].items()), flush=True)
    print(f"\nmedian of {args.runs} runs ({args.steps} steps each):")
    median = medians(results)
    for key, value in median.items():
        print(f"  {key:<45} {value:6.1f}s  ({kind(key)})")
    if args.json:
        result_of(results, median).write(args.json)


if __name__ == "__main__":
    main()
