"""A snapshot refresh: what letting a `snapshot` seat's generators forward costs the trained policy.

    .venv/bin/python -m benchmarks.learning.snapshot_refresh [--steps 40] [--refresh-steps 5] [--lag 2] [--rounds 2]
    .venv/bin/python -m benchmarks.learning.snapshot_refresh --json benchmarks/results/snapshot_refresh.json

Self-play of IteratedPrisonersDilemma-v0 (one round: a free message, then a decision; every turn
valid, so the snapshot's seat always plays) against the snapshot (env.seats=[policy,snapshot]),
the tiny bytes model on CPU, its games on a proc of their own, in two arms run in turns: the
snapshot refreshed every --refresh-steps steps to the version --lag steps before (copied aside
when it is published), and never (its refresh_steps past the run's steps: the same procs and
games, no refresh). A refresh is due when version k is published (k a multiple of
--refresh-steps); the steps around it are steps k and k + 1 (the refresh runs beside step k + 1). Per arm the median step time (seconds between consecutive steps' `time/wall_s`,
the first step left out: it waits for the first games); the slowest step around a refresh against
the median of its own run (goal: at most 1.2x) and so the slowest of the other steps (what the
box's own noise gives), and the median step around a refresh against that of the run's other steps; each refresh's time and the bytes it copied (`snapshot/refresh_ms`,
`snapshot/refresh_bytes`).
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, timed_run
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows

GAME = [
    "--config-name=dilemma",  # a one-round game every seat plays to the end (configs/dilemma.yaml)
    "env.seats=[policy,snapshot]",
    "prompts_per_step=4",
    "group_size=4",
    "prompts_per_rollout=4",
    "eval.every_steps=0",
    "checkpoint.every_steps=0",
]
GOAL = 1.2  # the slowest step around a refresh, against its run's median


def one_run(steps: int, refresh_steps: int, lag: int) -> list[dict]:
    """The metrics rows of one run."""
    snapshot = [f"env.snapshot.refresh_steps={refresh_steps}", f"env.snapshot.lag={lag}"]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        timed_run(REPO, steps, [*GAME, *snapshot], run_dir)
        rows, _ = read_rows(run_dir)
    return rows


def step_times(rows: list[dict]) -> dict[int, float]:
    """Step -> its seconds (from the step before's end), the first step left out."""
    return {b["step"]: b["time/wall_s"] - a["time/wall_s"] for a, b in zip(rows, rows[1:])}


def around_refreshes(times: dict[int, float], refresh_steps: int) -> dict[int, float]:
    """The steps k and k + 1 of each refresh due at version k."""
    return {s: t for s, t in times.items() if s % refresh_steps in (0, 1) and s > 1}


def refreshes(rows: list[dict]) -> list[tuple[float, int]]:
    """(ms, bytes) of each refresh, as the row after it first reports it."""
    seen, found = 0, []
    for row in rows:
        if row["snapshot/refreshes"] > seen:
            seen = row["snapshot/refreshes"]
            found.append((row["snapshot/refresh_ms"], row["snapshot/refresh_bytes"]))
    return found


def measure(args) -> BenchmarkResult:
    arms = {"refreshed": (args.refresh_steps, args.lag), "never refreshed": (args.steps + 1, 0)}
    times: dict[str, list[dict[int, float]]] = {arm: [] for arm in arms}
    refreshed: list[tuple[float, int]] = []
    for round_ in range(args.rounds):
        for arm, (refresh_steps, lag) in arms.items():
            print(f"round {round_ + 1}/{args.rounds}: {arm} (refresh_steps={refresh_steps}, lag={lag}) ...")
            rows = one_run(args.steps, refresh_steps, lag)
            times[arm].append(step_times(rows))
            if arm == "refreshed":
                refreshed += refreshes(rows)
    result = BenchmarkResult("snapshot_refresh", "A snapshot refresh: the trained policy's step time", this_command())
    medians = {arm: statistics.median(t for run in runs for t in run.values()) for arm, runs in times.items()}
    slowest, slowest_away, typical = [], [], []  # per run, against its median (or its other steps')
    for run in times["refreshed"]:
        around = around_refreshes(run, args.refresh_steps)
        away = [t for s, t in run.items() if s not in around]
        median = statistics.median(run.values())
        slowest.append(max(around.values()) / median)
        slowest_away.append(max(away) / median)
        typical.append(statistics.median(around.values()) / statistics.median(away))
    rows = [
        ["median step (s)", *(round(medians[arm], 3) for arm in arms)],
        ["slowest step (s)", *(round(max(t for run in runs for t in run.values()), 3) for runs in times.values())],
    ]
    result.tables.append(Table(f"Step time over {args.rounds} runs of {args.steps} steps per arm", ["", *arms], rows))
    ms = [m for m, _ in refreshed]
    result.figure(f"slowest step around a refresh / its run's median, worst run (goal <= {GOAL})", max(slowest), "x")
    result.figure("slowest step away from refreshes / its run's median, worst run", max(slowest_away), "x")
    result.figure("median step around a refresh / the other steps' median", statistics.median(typical), "x")
    result.figure("median step, refreshed / never refreshed", medians["refreshed"] / medians["never refreshed"], "x")
    result.figure("refresh time (median)", statistics.median(ms), "ms")
    result.figure("bytes copied per refresh (aside, then swapped in)", refreshed[-1][1], "B")
    result.figure("refreshes measured", len(refreshed), "")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--refresh-steps", type=int, default=5)
    parser.add_argument("--lag", type=int, default=2, help="env.snapshot.lag")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each arm, in turns")
    add_json_argument(parser)
    args = parser.parse_args()
    result = measure(args)
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
