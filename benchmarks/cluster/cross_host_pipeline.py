"""The cost of crossing hosts: the CPU default across simulated hosts vs on one host, in one run (root).

For each layout, the same config runs twice, `--rounds` times in turn: on one host
(`python -m apps.grpo`), and across simulated hosts (network namespaces on this box,
launched with `python -m forge_async.cluster`; see forge_async/cluster/netns.py) with
the trainer on node 0 and the generators on the other nodes, so every version crosses
a link (gloo, `weights.cross_host`) to each generator host's relay:

- 2 hosts: one generator, on node 1;
- 4 hosts: three generators, on nodes 1-3 (against three generators on one host).

Every "host" shares this box's cores: the ratio is the cost of crossing hosts, not
more compute. Printed per run: steps/s over steps `--from`..`--steps`, mean reward
per step (learning must not change), the version each relay held at the end, the
versions it skipped and its failed links, and the CPU time each proc used a step
(/proc, over the same steps); then the steps/s ratio of the medians, the median of
each round's ratio (its two runs a minute apart), and the median ratio of the CPU
time a step (all procs), which a shared box's drifting speed moves least.

    sudo .venv/bin/python -m benchmarks.cluster.cross_host_pipeline [--steps 200] [--rounds 2] [--layouts 2 4] [--json PATH]
"""

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from forge_async.cli.subprocess_run import run_app
from benchmarks.harness.cluster_run import across_hosts, steps_per_s
from benchmarks.harness.proc_cpu import ProcCpu
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.cluster.netns import available
from forge_async.observability.metrics import read_rows


class CpuPerStep(threading.Thread):
    """Every proc's CPU time at steps `first` and `last` of the run writing `run_dir` (read
    from metrics.jsonl as it grows); `ms_per_step()` after the run."""

    def __init__(self, run_dir: Path, first: int, last: int):
        super().__init__(daemon=True)
        self.run_dir, self.first, self.last = run_dir, first, last
        self.cpu = ProcCpu(run_dir / "procs.json", every_host=True)

    def run(self) -> None:
        for step in (self.first, self.last):
            while self._step() < step:
                time.sleep(0.05)
            self.cpu.mark()

    def _step(self) -> int:
        try:
            rows = read_rows(self.run_dir)[0]
        except (OSError, ValueError):
            return 0
        return rows[-1]["step"] if rows else 0

    def ms_per_step(self) -> dict[str, float]:
        cores = self.cpu.cores()
        (start, _), (end, _) = self.cpu.marks[0], self.cpu.marks[-1]
        return {role: round(c * (end - start) / (self.last - self.first) * 1e3, 1) for role, c in cores.items()}


def one_host(run_dir: Path, overrides: list[str]) -> dict:
    result = run_app(run_dir, *overrides, timeout=900)
    if result.returncode != 0:
        sys.exit(f"the one-host run failed:\n{result.output[-3000:]}")
    return {}


def labels(hosts: int) -> tuple[str, str]:
    """A layout's two runs: on one host, across hosts."""
    return "one host", f"{hosts} hosts"


def medians(runs: list[dict], hosts: int) -> tuple[float, float]:
    """The layout's median steps/s on one host and across hosts."""
    one, across = (
        statistics.median(r["steps_per_s"] for r in runs if r["hosts"] == hosts and r["label"] == label)
        for label in labels(hosts)
    )
    return one, across


def round_ratios(runs: list[dict], hosts: int, key) -> list[float]:
    """Per round, `key(across-hosts run) / key(one-host run)`: two runs a minute apart, so a box
    whose speed drifts over minutes (a shared VM) moves both."""
    layout = [r for r in runs if r["hosts"] == hosts]
    by_round: dict[int, dict[str, dict]] = {}
    for run in layout:
        by_round.setdefault(run["round"], {})[run["label"]] = run
    one_label, across_label = labels(hosts)
    return [key(pair[across_label]) / key(pair[one_label]) for _, pair in sorted(by_round.items())]


def cpu_ms_per_step(run: dict) -> float:
    """Every proc's CPU ms a step, summed."""
    return sum(run["cpu"].values())


def ratios(runs: list[dict], hosts: int) -> dict[str, float]:
    """The layout's steps/s ratio three ways: of the medians, the median of the rounds' ratios, and the
    median of the rounds' CPU ratios (one host's CPU ms a step / across hosts'), which a box's
    speed moves least: on a CPU-bound box it bounds the steps/s ratio."""
    one, across = medians(runs, hosts)
    return {
        "steps/s, of the medians": across / one,
        "steps/s, median of the rounds": statistics.median(round_ratios(runs, hosts, lambda r: r["steps_per_s"])),
        "CPU a step, inverse, median of the rounds": statistics.median(
            1 / x for x in round_ratios(runs, hosts, cpu_ms_per_step)
        ),
    }


def relays_cell(run: dict) -> str:
    relays = run["extra"].get("relays", [])
    return "; ".join(
        f"version {r['version']}, {r['versions_skipped']} skipped, {r['link_failures']} failed links" for r in relays
    )


def cpu_table(runs: list[dict], hosts: int, first: int, last: int) -> Table:
    """Each proc's CPU ms a step in the layout's first round, on one host and across hosts, and their sum."""
    one, across = (
        [r for r in runs if r["hosts"] == hosts and r["label"] == label and r["round"] == 0][0]["cpu"]
        for label in labels(hosts)
    )
    rows = [[role, one.get(role), across.get(role)] for role in dict.fromkeys([*one, *across])]
    rows.append(["all", round(sum(one.values()), 1), round(sum(across.values()), 1)])
    return Table(
        f"CPU ms a step over steps {first}-{last}, {hosts}-host layout, round 0", ["proc", *labels(hosts)], rows
    )


def result_of(runs: list[dict], layouts: list[int], first: int, steps: int) -> BenchmarkResult:
    result = BenchmarkResult("cross_host_pipeline", "Crossing hosts in a run", this_command())
    for hosts in layouts:
        one, across = medians(runs, hosts)
        for how, ratio in ratios(runs, hosts).items():
            result.figure(f"{hosts} hosts / one host: {how}", ratio, "x")
        result.figure(f"{hosts}-host layout, one host", one, "steps/s")
        result.figure(f"{hosts}-host layout, across hosts", across, "steps/s")
    columns = ["layout", "run", "round", "steps/s", "CPU ms a step", "mean reward", "relays"]
    rows = [
        [
            f"{r['hosts']} hosts",
            r["label"],
            r["round"],
            round(r["steps_per_s"], 2),
            round(cpu_ms_per_step(r), 1),
            round(r["reward"], 3),
            relays_cell(r),
        ]
        for r in runs
    ]
    result.tables.append(Table(f"Steps/s over steps {first}-{steps}", columns, rows))
    result.tables += [cpu_table(runs, hosts, first, steps - 5) for hosts in layouts]
    names = [f"{hosts} hosts" for hosts in layouts]
    lines = [
        Line(label, names, [medians(runs, hosts)[i] for hosts in layouts])
        for i, label in enumerate(("one host", "across hosts"))
    ]
    result.series.append(
        Series(f"Steps/s over steps {first}-{steps} (median of the rounds)", "", "steps/s", lines, bars=True)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--from", dest="first", type=int, default=50, help="the steady state's first step")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--layouts", type=int, nargs="+", default=[2, 4], help="hosts: trainer on 1, generators on the rest"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    if available() is not None:
        sys.exit(f"cannot simulate hosts here: {available()}")
    root = Path(tempfile.mkdtemp(prefix="cross_host_pipeline-"))
    print(f"runs in {root}")
    runs = []
    for hosts in args.layouts:
        overrides = [f"steps={args.steps}", f"generator.count={hosts - 1}", "checkpoint.every_steps=0", *args.overrides]
        for round_ in range(args.rounds):
            for label in labels(hosts):
                run_dir = root / f"{hosts}hosts_round{round_}_{label.replace(' ', '_')}"
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                cpu = CpuPerStep(run_dir, args.first, args.steps - 5)  # before the end: the procs still run
                cpu.start()
                extra = one_host(run_dir, overrides) if label == "one host" else across_hosts(run_dir, hosts, overrides)
                rate, reward = steps_per_s(run_dir, args.first, args.steps)
                runs.append(
                    {
                        "hosts": hosts,
                        "label": label,
                        "round": round_,
                        "steps_per_s": rate,
                        "reward": reward,
                        "extra": extra,
                        "cpu": cpu.ms_per_step(),
                    }
                )
                print(
                    f"{hosts} hosts layout, {label:>8}: {rate:6.2f} steps/s, mean reward {reward:.3f} {extra or ''}",
                    flush=True,
                )
                print(f"    CPU ms a step: {runs[-1]['cpu']}", flush=True)
        one, across = medians(runs, hosts)
        print(
            f"{hosts} hosts / one host (medians {across:.2f} / {one:.2f} steps/s): "
            + "; ".join(f"{how} {ratio:.2f}" for how, ratio in ratios(runs, hosts).items()),
            flush=True,
        )
    if args.json:
        result_of(runs, args.layouts, args.first, args.steps).write(args.json)


if __name__ == "__main__":
    main()
