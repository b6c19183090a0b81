"""Two policies trained together in one game, against one policy playing itself: Nim (env.name=nim,
configs/selfplay_nim.yaml, in async steps at lr 1e-3), the tiny digits model on CPU, one run of
each arm in turns per round:

    two policies   env.seats=[policy,rival]    seat 0 the policy, seat 1 the rival (rival.*): a
                                               trainer, generator and buffer of its own
    self-play      env.seats=[policy,policy]   both seats the policy: one trainer, one generator

    .venv/bin/python -m benchmarks.learning.rival                 # 2 rounds of 100 steps per arm
    .venv/bin/python -m benchmarks.learning.rival --json benchmarks/results/rival.json

Both arms train the same samples per step of the policy's trainer (a Nim game gives a sample per
trained seat), so a two-policy game gives the policy one sample and the rival one. Per run: samples
trained per second from the first step to the last, by both trainers together (goal: two policies
at >= 0.8x self-play's on one host), and the CPU seconds each process spent over those steps (from
/proc, with its child processes), by role; each policy's training reward over the steps
(`reward/mean`, `rival/reward`: +1 a won game, -1 a lost one) and the policy's win rate against the
random seat (eval.seats=[policy,random], greedy, held-out seeds).
"""

import argparse
import json
import os
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.harness.app_run import REPO, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows

ARMS = {"two policies": "[policy,rival]", "self-play": "[policy,policy]"}
COMMON = [
    "--config-name=selfplay_nim",
    "mode=async",  # the preset's sync steps would make both arms wait for every batch
    "trainer.lr=1e-3",
    "eval.seats=[policy,random]",
    "eval.every_steps=10",
    "eval.prompts=64",
    "prompts_per_step=8",
    "prompts_per_rollout=8",
    "group_size=8",
    "checkpoint.every_steps=0",
]
GOAL = 0.8  # two policies' samples/s against self-play's


def cpu_seconds_by_pid() -> tuple[dict[int, float], dict[int, int]]:
    """Every process's CPU seconds (user + system) and its parent, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu, parent = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    return cpu, parent


def cpu_by_role(procs_file: Path) -> dict[str, float]:
    """Each role's CPU seconds so far: its procs' and their descendants' (vLLM's engine process)."""
    cpu, parent = cpu_seconds_by_pid()
    children = defaultdict(list)
    for pid, ppid in parent.items():
        children[ppid].append(pid)

    def tree(pid: int) -> float:
        return cpu.get(pid, 0.0) + sum(tree(child) for child in children[pid])

    roles = {}
    for role, where in json.loads(procs_file.read_text()).items():
        entries = where if isinstance(where, list) else [where]
        roles[role] = sum(cpu.get(e["pid"], 0.0) if role == "controller" else tree(e["pid"]) for e in entries)
    return roles


def one_run(arm: str, args: argparse.Namespace) -> dict:
    """One arm's run: its rows and evaluations, and each role's CPU seconds from step 1 to the last."""
    marks = {}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"

        def on_line(line: str) -> None:
            for step in (1, args.steps):
                if line.startswith(f"step {step:>4}/{args.steps} "):
                    marks[step] = cpu_by_role(run_dir / "procs.json")

        timed_run(REPO, args.steps, [*COMMON, f"env.seats={ARMS[arm]}", *args.overrides], run_dir, on_line=on_line)
        rows, evaluations = read_rows(run_dir)
    cpu = {role: marks[args.steps][role] - marks[1].get(role, 0.0) for role in marks[args.steps]}
    return {"arm": arm, "rows": rows, "evaluations": evaluations, "cpu": cpu}


def samples_per_s(run: dict) -> float:
    """Samples trained by the run's trainers from its first step to its last, per second."""
    first, last = run["rows"][0], run["rows"][-1]

    def trained(row: dict) -> int:
        return row["samples/trained"] + row.get("rival/trained", 0)

    return (trained(last) - trained(first)) / (last["time/wall_s"] - first["time/wall_s"])


def cpu_split(run: dict) -> dict[str, float]:
    """CPU seconds over the steps by what they serve: each policy's trainer and generators, the rest."""
    split = defaultdict(float)
    for role, seconds in run["cpu"].items():
        if role == "trainer" or role == "generator0":
            split["policy: trainer + generator"] += seconds
        elif role == "rival_trainer" or role.startswith("generator"):
            split["rival: trainer + generator"] += seconds
        else:
            split["controller, buffer, games"] += seconds
    return dict(split)


def carried(values: list[float | None]) -> list[float]:
    """`values`, a missing one (no rival game ended since the row before) the one before it (0 first)."""
    out, last = [], 0.0
    for value in values:
        last = last if value is None else value
        out.append(last)
    return out


def smoothed(values: list[float], window: int) -> list[float]:
    return [statistics.fmean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def result_of(runs: list[dict], args: argparse.Namespace) -> BenchmarkResult:
    result = BenchmarkResult("rival", "Two policies trained in one game, against self-play", this_command())
    rates = {arm: [samples_per_s(r) for r in runs if r["arm"] == arm] for arm in ARMS}
    medians = {arm: statistics.median(r) for arm, r in rates.items()}
    ratio = medians["two policies"] / medians["self-play"]
    result.figure(f"two policies / self-play, samples trained per second (goal >= {GOAL})", ratio, "x")
    for arm in ARMS:
        result.figure(f"{arm}: samples trained per second (median of {args.rounds})", medians[arm], "samples/s")
    rivals = [r for r in runs if r["arm"] == "two policies"]
    last = [r["rows"][-1] for r in rivals]
    result.figure(
        "two policies: the rival's version at the end / the policy's",
        statistics.median(row["rival/version"] / row["step"] for row in last),
        "x",
    )
    result.figure(
        "two policies: the rival's stale drops / its samples",
        statistics.median(row["rival/dropped_stale"] / row["rival/generated"] for row in last),
        "",
    )
    splits = [cpu_split(r) for r in runs]
    names = sorted({name for split in splits for name in split})
    result.tables.append(
        Table(
            f"CPU seconds from step 1 to step {args.steps}, per run, by what they serve",
            ["arm", "samples/s", *names],
            [
                [r["arm"], round(samples_per_s(r), 1), *(round(split.get(name, 0.0), 1) for name in names)]
                for r, split in zip(runs, splits)
            ],
        )
    )
    window = 10
    for i, run in enumerate(rivals):
        steps = [row["step"] for row in run["rows"]]
        policy = smoothed([row["reward/mean"] for row in run["rows"]], window)
        rival = smoothed(carried([row.get("rival/reward") for row in run["rows"]]), window)
        result.series.append(
            Series(
                f"two policies, round {i + 1}: training reward ({window}-step mean)",
                "step",
                "reward",
                [Line("policy (seat 0)", steps, policy), Line("rival (seat 1)", steps, rival)],
            )
        )
    lines = [
        Line(
            f"{r['arm']}, round {1 + [x for x in runs if x['arm'] == r['arm']].index(r)}",
            [e["eval/version"] for e in r["evaluations"]],
            [e["eval/won_frac"] for e in r["evaluations"]],
        )
        for r in runs
    ]
    result.series.append(
        Series("the policy's win rate against random (greedy, 64 held-out seeds)", "step", "won", lines)
    )
    result.tables += series_tables(result.series)
    return result


def series_tables(series: list[Series], every: int = 20) -> list[Table]:
    """The series as tables the docs show: the training rewards every `every` steps (and at the
    last), and each run's win rate against random at its first and last evaluation."""
    *rewards, won = series
    steps = rewards[0].lines[0].x
    shown = [i for i, step in enumerate(steps) if step == 1 or step % every == 0 or i == len(steps) - 1]
    columns = ["step", *(f"{s.title.split(':')[0]}: {line.label}" for s in rewards for line in s.lines)]
    rows = [[steps[i], *(round(line.y[i], 2) for s in rewards for line in s.lines)] for i in shown]
    reward_table = Table(
        f"Training reward ({rewards[0].title.split('(')[1][:-1]}), +1 a won game, -1 a lost one", columns, rows
    )
    won_rows = [[line.label, line.x[0], round(line.y[0], 2), line.x[-1], round(line.y[-1], 2)] for line in won.lines]
    won_table = Table(won.title.capitalize(), ["run", "first step", "won", "last step", "won"], won_rows)
    return [reward_table, won_table]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100, help="each run's")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each arm, in turns")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    runs = []
    for round_ in range(args.rounds):
        for arm in ARMS:
            print(f"round {round_ + 1}/{args.rounds}: {arm} (env.seats={ARMS[arm]}) ...", flush=True)
            runs.append(one_run(arm, args))
            print(f"  {samples_per_s(runs[-1]):.1f} samples/s; CPU s {cpu_split(runs[-1])}", flush=True)
    result = result_of(runs, args)
    for series in result.series:
        print(f"\n{series.title}")
        for line in series.lines:
            print(f"  {line.label}: " + " ".join(f"{x}:{y:.2f}" for x, y in list(zip(line.x, line.y))[::10]))
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
