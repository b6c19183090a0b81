"""Resident memory of every proc over a long run of the default app, and how the run directory grows.

    .venv/bin/python -m benchmarks.pipeline.soak [--steps 20000] [--every 5] [--warmup 0.1] [-- overrides ...]

Runs `python -m apps.grpo steps=N` (extra Hydra overrides passed through) and, every
`--every` seconds, reads each role's resident set (VmRSS in /proc/PID/status; pids from
RUN_DIR/procs.json) and the step the console last printed. Prints per role: the resident set
when the warm-up ends (the first `--warmup` of the steps) and at the end, and the slope after
the warm-up (least squares of resident set against step) in KB per step and MB per hour at the
measured pace; then every file of the run directory with its growth per 1,000 steps, and the
run's reward and sample accounting (summary.json). With --json, the memory and the run
directory in the report's shape (benchmarks/harness/results.py), each role's resident set over the
steps as a plot.
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from forge_async.cli.subprocess_run import REPO, hydra_command_line
from benchmarks.harness.proc_cpu import local_pids
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from benchmarks.harness.app_run import STEP_LINE


@dataclass
class Sample:
    seconds: float  # since launch
    step: int
    rss_kb: dict[str, int]  # role -> VmRSS


def rss_kb(pid: int) -> int | None:
    """VmRSS of `pid` in KB, None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return int(line.split()[1]) if line else None


class ConsoleStep:
    """The app's console, echoed to a log file; `step` is the last step line's step."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self.step = 0
        self.tail: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc, log), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen, log: Path) -> None:
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                self.tail = (self.tail + [line])[-40:]
                if match := STEP_LINE.match(line):
                    self.step = int(match.group(1))

    def join(self) -> None:
        self._thread.join()


def soak(run_dir: Path, steps: int, every_s: float, overrides: list[str]) -> list[Sample]:
    """Run the app to its end, sampling every role's resident set every `every_s` seconds."""
    command = [sys.executable, "-m", "apps.grpo", *hydra_command_line(run_dir, (f"steps={steps}", *overrides))]
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    console = ConsoleStep(proc, run_dir.parent / f"{run_dir.name}.console.log")
    samples = []
    while proc.poll() is None:
        time.sleep(every_s)
        procs_file = run_dir / "procs.json"
        if console.step == 0 or not procs_file.exists():
            continue
        rss = {role: rss_kb(pid) for role, pid in local_pids(procs_file).items()}
        samples.append(Sample(time.perf_counter() - start, console.step, {r: kb for r, kb in rss.items() if kb}))
    console.join()
    if proc.returncode != 0:
        raise SystemExit("the app failed:\n" + "".join(console.tail))
    return samples


@dataclass
class RoleMemory:
    start_mb: float  # at the warm-up's end
    end_mb: float
    kb_per_step: float  # the slope after the warm-up
    halves: tuple[float, float]  # the slope over each half of the samples after the warm-up


@dataclass
class Memory:
    first_step: int  # the samples after the warm-up, up to the last (taken as the run ends)
    last_step: int
    samples: int
    steps_per_hour: float
    roles: dict[str, RoleMemory]


def memory(samples: list[Sample], warmup_steps: int) -> Memory:
    """Each role's resident set and its growth after the warm-up."""
    after = [s for s in samples if s.step >= warmup_steps and s.step < samples[-1].step]
    if len(after) < 6:
        raise SystemExit(f"only {len(after)} samples after the warm-up: run more steps or sample more often")
    first, last = after[0], after[-1]
    roles = {}
    for role in sorted(last.rss_kb):
        points = [(s.step, s.rss_kb[role]) for s in after if role in s.rss_kb]
        half = len(points) // 2
        roles[role] = RoleMemory(
            points[0][1] / 1024,
            points[-1][1] / 1024,
            kb_per_step(points),
            (kb_per_step(points[:half]), kb_per_step(points[half:])),
        )
    steps_per_hour = (last.step - first.step) / (last.seconds - first.seconds) * 3600
    return Memory(first.step, last.step, len(after), steps_per_hour, roles)


MEMORY_COLUMNS = ["role", "warm-up end MB", "end MB", "KB/step", "MB/h", "1st half", "2nd half"]


def memory_rows(m: Memory) -> list[list]:
    return [
        [role, r.start_mb, r.end_mb, r.kb_per_step, r.kb_per_step * m.steps_per_hour / 1024, *r.halves]
        for role, r in m.roles.items()
    ]


def print_memory(m: Memory) -> None:
    print(
        f"\nresident set per role, after the warm-up (steps {m.first_step}-{m.last_step}, "
        f"{m.samples} samples, {m.steps_per_hour:,.0f} steps/h)"
    )
    print(
        f"{'role':<18} {'warm-up end MB':>14} {'end MB':>8} {'KB/step':>8} {'MB/h':>7} {'1st half':>9} {'2nd half':>9}"
    )
    for role, start_mb, end_mb, slope, mb_per_hour, first_half, second_half in memory_rows(m):
        print(
            f"{role:<18} {start_mb:>14.0f} {end_mb:>8.0f} {slope:>8.2f} {mb_per_hour:>7.1f} "
            f"{first_half:>9.2f} {second_half:>9.2f}"
        )
    print("(KB/step: the slope after the warm-up; each half's slope: a plateau shows as a lower second half)")


def kb_per_step(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (step, KB) points."""
    return statistics.linear_regression(*zip(*points)).slope


def run_dir_sizes(run_dir: Path) -> list[tuple[str, int]]:
    """(path, bytes) of every file of the run directory (each log file too), and of each other
    directory as a whole (its path ending in /)."""
    sizes = []
    for path in sorted(run_dir.iterdir()):
        if path.is_file():
            sizes.append((path.name, path.stat().st_size))
        elif path.name == "logs":
            sizes += [(f"logs/{log.name}", log.stat().st_size) for log in sorted(path.iterdir())]
        else:
            sizes.append((path.name + "/", sum(f.stat().st_size for f in path.rglob("*") if f.is_file())))
    return sizes


def per_thousand_steps(label: str, size: int, steps: int) -> float | None:
    """KB per 1,000 steps of a file; None for a directory (its size only)."""
    return None if label.endswith("/") else size / 1024 / steps * 1000


def print_run_dir(run_dir: Path, sizes: list[tuple[str, int]], steps: int) -> None:
    print(f"\nrun directory {run_dir} after {steps} steps")
    print(f"{'path':<36} {'MB':>8} {'KB per 1,000 steps':>19}  (directories: size only)")
    for label, size in sizes:
        growth = per_thousand_steps(label, size, steps)
        print(f"{label:<36} {size / 2**20:>8.2f}" + (f" {growth:>19.1f}" if growth is not None else ""))


def print_summary(run_dir: Path) -> None:
    s = json.loads((run_dir / "summary.json").read_text())
    print(
        f"\nreward {s['reward_first']:.2f} -> {s['reward_last']:.2f} in {s['wall_s']:.0f} s; "
        f"generated {s['generated']:,} = trained {s['trained']:,} + dropped stale {s['dropped_stale']:,} "
        f"+ dropped other {s['dropped_other']:,} + left in buffer {s['left_in_buffer']:,} "
        f"+ in flight {s['in_flight']:,} (accounting {'ok' if s['accounting_ok'] else 'does NOT add up'})"
    )


def result_of(samples: list[Sample], measured: Memory, sizes: list[tuple[str, int]], steps: int) -> BenchmarkResult:
    result = BenchmarkResult("soak", "Memory over a long run", this_command())
    for role, r in measured.roles.items():
        result.figure(f"{role} resident set growth after the warm-up", r.kb_per_step, "KB/step")
    result.figure("pace after the warm-up", measured.steps_per_hour, "steps/h")
    result.tables.append(
        Table(
            f"Resident set per role, steps {measured.first_step}-{measured.last_step} ({measured.samples} samples)",
            MEMORY_COLUMNS,
            memory_rows(measured),
        )
    )
    rows = [[label, size / 2**20, per_thousand_steps(label, size, steps)] for label, size in sizes]
    result.tables.append(Table(f"Run directory after {steps} steps", ["path", "MB", "KB per 1,000 steps"], rows))
    lines = [Line(role, *rss_mb_by_step(samples, role)) for role in measured.roles]
    result.series.append(Series("Resident set per role over the run", "step", "MB", lines))
    return result


def rss_mb_by_step(samples: list[Sample], role: str) -> tuple[list[int], list[float]]:
    """(steps, resident set in MB) of `role` over the run, the warm-up included."""
    seen = [s for s in samples if role in s.rss_kb]
    return [s.step for s in seen], [s.rss_kb[role] / 1024 for s in seen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the steps left out of the slope")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/soak_<time>")
    parser.add_argument("overrides", nargs="*")
    add_json_argument(parser)
    args = parser.parse_args()
    run_dir = (args.run_dir or REPO / "runs" / time.strftime("soak_%Y-%m-%d_%H-%M-%S")).resolve()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.steps} steps -> {run_dir} (console: {run_dir.name}.console.log beside it)", flush=True)
    samples = soak(run_dir, args.steps, args.every, args.overrides)
    measured = memory(samples, int(args.steps * args.warmup))
    print_memory(measured)
    sizes = run_dir_sizes(run_dir)
    print_run_dir(run_dir, sizes, args.steps)
    print_summary(run_dir)
    if args.json:
        result_of(samples, measured, sizes, args.steps).write(args.json)


if __name__ == "__main__":
    main()
