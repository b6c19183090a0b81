"""Rollout routing with one slow generator host: least_outstanding vs round_robin, in one run (root).

Three simulated hosts (benchmarks/harness/cluster_run.py, forge_async/cluster/netns.py):
the trainer on node 0, a generator on each of nodes 1 and 2, and node 2 made a slow host:
once the run has started (a cap from the start slows node 2's joining past Monarch's
attach timeout), a CPU cgroup caps all its processes together at `--cpu` of one core
(default 0.25), as if it had less compute of its own. `rollout_workers=4` keeps more calls going than there
are generators, so the routing has a choice. For each routing, in turn `--rounds` times:
steps/s over steps `--from`..`--steps`, and the samples each generator returned. With --json,
the same in the report's shape (benchmarks/harness/results.py).

    sudo .venv/bin/python -m benchmarks.cluster.routing [--steps 200] [--rounds 2] [--cpu 0.25]
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from benchmarks.harness.cluster_run import across_hosts, steps_per_s
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.cluster.netns import available

ROUTINGS = ("round_robin", "least_outstanding")
_PERIOD_US = 100_000


@contextmanager
def cpu_capped(fraction: float) -> Iterator[list[str]]:
    """A CPU cgroup capped at `fraction` of one core (cgroup v2, else v1's cpu controller);
    yields its `cgroup.procs` file (a pid written there moves into it)."""
    name = f"forge_async-slow-{uuid.uuid4().hex[:6]}"
    quota = int(fraction * _PERIOD_US)
    v2, v1 = Path("/sys/fs/cgroup") / name, Path("/sys/fs/cgroup/cpu") / name
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        group, setting = v2, (v2 / "cpu.max", f"{quota} {_PERIOD_US}")
    elif v1.parent.is_dir():
        group, setting = v1, (v1 / "cpu.cfs_quota_us", str(quota))
    else:
        sys.exit("no CPU cgroup controller here to slow a host with")
    group.mkdir()
    try:
        setting[0].write_text(setting[1])
        yield group / "cgroup.procs"
    finally:
        group.rmdir()


def slow_down(run_dir: Path, cgroup_procs: Path, cluster) -> None:
    """Once the run's first step is out, move every process of node 2 into the capped cgroup."""
    while not (run_dir / "metrics.jsonl").exists():
        time.sleep(0.2)
    for pid in cluster.pids(2):
        try:
            cgroup_procs.write_text(str(pid))
        except OSError:  # gone meanwhile
            pass


RUN_COLUMNS = ["round", "rollout_routing", "steps/s", "mean reward", "samples from node 1", "samples from node 2"]


def medians(rows: list[list]) -> dict[str, float]:
    """Median steps/s per routing, from rows of RUN_COLUMNS."""
    return {routing: statistics.median(row[2] for row in rows if row[1] == routing) for routing in ROUTINGS}


def samples_from(rows: list[list], routing: str, node: int) -> int:
    """The samples node `node`'s generator returned over every run of `routing`."""
    column = RUN_COLUMNS.index(f"samples from node {node}")
    return sum(row[column] for row in rows if row[1] == routing)


def result_of(rows: list[list], median: dict[str, float], cpu: float) -> BenchmarkResult:
    result = BenchmarkResult("routing", "Routing with a slow generator host", this_command())
    base, routed = (median[r] for r in ROUTINGS)
    result.figure("least_outstanding / round_robin, median steps/s", routed / base, "x")
    for routing in ROUTINGS:
        result.figure(f"{routing}: median steps/s", median[routing], "steps/s")
    result.tables.append(Table(f"Every run, node 2 capped at {cpu} of a core", RUN_COLUMNS, rows))
    lines = [Line(f"node {node}", list(ROUTINGS), [samples_from(rows, r, node) for r in ROUTINGS]) for node in (1, 2)]
    result.series.append(
        Series(
            "Samples each generator returned, all rounds (node 2 the slow host)",
            "rollout_routing",
            "samples",
            lines,
            bars=True,
        )
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--from", dest="first", type=int, default=30, help="the steady state's first step")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cpu", type=float, default=0.25, help="the slow host's share of one core")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    if available() is not None:
        sys.exit(f"cannot simulate hosts here: {available()}")
    root = Path(tempfile.mkdtemp(prefix="routing-"))
    print(f"runs in {root}; node 2 capped at {args.cpu} of a core")
    overrides = [
        f"steps={args.steps}",
        "generator.count=2",
        "rollout_workers=4",
        "checkpoint.every_steps=0",
        *args.overrides,
    ]
    rows = []
    for round_ in range(args.rounds):
        for routing in ROUTINGS:
            run_dir = root / f"round{round_}_{routing}"
            with cpu_capped(args.cpu) as procs:
                across_hosts(run_dir, 3, [*overrides, f"rollout_routing={routing}"], partial(slow_down, run_dir, procs))
            rate, reward = steps_per_s(run_dir, args.first, args.steps)
            samples = json.loads((run_dir / "summary.json").read_text())["generator_samples"]
            rows.append([round_, routing, rate, reward, samples[0], samples[1]])
            print(
                f"{routing:>17}: {rate:6.2f} steps/s, mean reward {reward:.3f}, samples from node 1 / node 2: "
                f"{samples[0]} / {samples[1]}",
                flush=True,
            )
    median = medians(rows)
    base, routed = (median[r] for r in ROUTINGS)
    print(f"least_outstanding / round_robin: {routed / base:.2f} (medians {routed:.2f} / {base:.2f} steps/s)")
    if args.json:
        result_of(rows, median, args.cpu).write(args.json)


if __name__ == "__main__":
    main()
