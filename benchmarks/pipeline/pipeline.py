"""How busy both sides of the async pipeline are, from one run's own timeline (trace.json).

    .venv/bin/python -m benchmarks.pipeline.pipeline                      # the default config, 250 steps
    .venv/bin/python -m benchmarks.pipeline.pipeline --steps 400 -- task.num_digits=5

Runs `python -m apps.grpo` once and prints, for the steady state (after the first
10 steps): steps/s, the median step time, what one batch costs each side in the
same run (generate: the generator's decode + weight swaps per step; train:
forward + backward + optimizer + publish), the ratio step / max(generate, train)
(1.0 = no bubble: the slower side never waits), trainer idle, generator idle and
held back by admission (per rollout worker, and the generator's idle time while a worker
was: what the age bound cost generation), the cores each proc used in the steady state
(from /proc), the idle floor those imply for the trainer and the generator on this host's
cores (`idle_floor`: below it, a side's idle time is the box's bound, not a bubble), and
from launch to the first step whose 5-step average reward reaches 0.8.
"""

import argparse
import os
import tempfile
from functools import partial
from pathlib import Path

from benchmarks.harness.proc_cpu import ProcCpu
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from benchmarks.harness.app_run import REPO, STEP_LINE, launch_to_reward, timed_run
from forge_async.observability.metrics import read_rows
from forge_async.observability.step_budget import ALL_LANES, HELD_BACK, IDLE_HELD_BACK, budget, format_budget


def _sum(medians: dict, track: str, names: tuple[str, ...]) -> float:
    return sum(v for k, v in medians.items() if k.startswith(f"{track} |") and k.rsplit(" | ", 1)[1] in names)


_FLOOR_ROLES = {"trainer": "trainer rank 0", "generator": "generator0"}  # label -> role in procs.json
_FIRST_MARK = 10  # the step the steady state starts at (the budget's too)
_LAST_MARK_BEFORE_END = 5  # steps before the end: the procs are still running


def _mark(cpu: ProcCpu, steps: int, line: str) -> None:
    """Every proc's CPU time at the steady state's first step and near the end."""
    match = STEP_LINE.match(line)
    if match and int(match.group(1)) in (_FIRST_MARK, steps - _LAST_MARK_BEFORE_END):
        cpu.mark()


def _format_cores(cores: dict[str, float], host_cores: int) -> str:
    if not cores:
        return "not measured (too few steps)"
    listed = ", ".join(f"{role} {n:.2f}" for role, n in sorted(cores.items(), key=lambda kv: -kv[1]))
    return f"{listed} (total {sum(cores.values()):.2f} of {host_cores})"


def idle_floor(cores: dict[str, float], role: str, host_cores: int) -> float | None:
    """The least idle time (a fraction of the step) `role` can have on `host_cores` cores, were
    every proc to keep its CPU work per step: the step lasts at least all procs' work spread
    over every core, and `role` (one compute thread) is busy for its own work only. None: not
    measured."""
    total = sum(cores.values())
    if role not in cores or total <= 0:
        return None
    return max(0.0, 1 - cores[role] * host_cores / total)


def _format_floors(cores: dict[str, float], roles: dict[str, str], host_cores: int) -> str:
    floors = {label: idle_floor(cores, role, host_cores) for label, role in roles.items()}
    if None in floors.values():
        return "not measured (too few steps)"
    return ", ".join(f"{label} {floor:.0%}" for label, floor in floors.items())


def _format_reached(reached: tuple[float, int] | None) -> str:
    return f"{reached[0]:.1f} s (step {reached[1]})" if reached else "not reached"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides")
    add_json_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        print(f"running apps.grpo steps={args.steps} {' '.join(args.overrides)} ...", flush=True)
        cpu = ProcCpu(run_dir / "procs.json")
        lines = timed_run(REPO, args.steps, args.overrides, run_dir, on_line=partial(_mark, cpu, args.steps))
        metrics, _ = read_rows(run_dir)
        result = budget(run_dir)
    m = result["median_ms"]
    generate = _sum(m, "generator 0", ("decode", "swap weights"))
    train = _sum(m, "trainer rank 0", ("forward", "backward", "optimizer", "publish weights"))
    held = [v for k, v in m.items() if k.endswith(f"| {HELD_BACK}")]
    generator_idle = m.get(f"generator 0 | {ALL_LANES} | idle", m["generator 0 | main | idle"])
    generator_held = m.get(f"generator 0 | {ALL_LANES} | {IDLE_HELD_BACK}", 0.0)
    cores, host_cores = cpu.cores(), len(os.sched_getaffinity(0))
    print(f"\n{format_budget(result)}\n")
    rows = [
        ("steady-state steps/s", f"{1e3 / m['step']:.2f}"),
        ("median step (ms)", f"{m['step']:.1f}"),
        ("generate per batch (ms)", f"{generate:.1f}"),
        ("train per batch (ms)", f"{train:.1f}"),
        ("step / max(generate, train)", f"{m['step'] / max(generate, train):.2f}"),
        ("trainer idle", f"{m['trainer rank 0 | main | idle'] / m['step']:.0%}"),
        ("generator idle (not decoding or swapping)", f"{generator_idle / m['step']:.0%}"),
        ("generation held back (mean per worker)", f"{sum(held) / max(len(held), 1) / m['step']:.0%}"),
        ("generator idle, a request held back", f"{generator_held / m['step']:.0%}"),
        (f"launch -> 5-step mean reward {args.target}", _format_reached(launch_to_reward(lines, metrics, args.target))),
        ("launch -> exit (s)", f"{lines[-1][0]:.1f}"),
        (f"cores used, steps {_FIRST_MARK}-{args.steps - _LAST_MARK_BEFORE_END}", _format_cores(cores, host_cores)),
        (f"idle floor on {host_cores} cores", _format_floors(cores, _FLOOR_ROLES, host_cores)),
    ]
    for label, value in rows:
        print(f"{label:<42} {value}")
    if args.json:
        result = BenchmarkResult("pipeline", "Pipeline: how busy both sides are", this_command())
        result.figure("steady-state steps/s", 1e3 / m["step"], "steps/s")
        result.figure("step / max(generate, train)", m["step"] / max(generate, train), "x")
        result.tables.append(Table("Steady state", ["", "value"], [list(row) for row in rows]))
        budget_bars = Line("median per step", ["step", "generate", "train"], [m["step"], generate, train])
        result.series.append(
            Series(
                "Pipeline budget: one step against what each side spends on a batch", "", "ms", [budget_bars], bars=True
            )
        )
        result.write(args.json)


if __name__ == "__main__":
    main()
