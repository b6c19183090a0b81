"""Start-up and teardown of `python -m apps.grpo`, from outside, as a user sees them.

    python -m benchmarks.pipeline.startup [--runs 5] [--steps 20] [--repo PATH] [-- overrides ...]

Runs the app `--runs` times (after one warm-up run that fills the OS file cache) and
timestamps every console line against the launch. Prints, per run and as medians:
launch -> start-up phases (the app's own `[ t.ts] ...` lines) -> first training step,
and last step -> final save -> report -> process exit.

Where the first step's time goes, per process: the start-up spans of the run's trace.json
(observability/span_names.py: each proc's spawn and bootstrap imports, the controller's
phases, each role's spawn and set-up, a generator's engine start from the console's
"meshes up" line, then each actor's first step), seconds since the controller's launch;
and the CPU seconds each process had used when the first step's line was printed
(/proc/PID/stat, the processes named by the run's procs.json). `--repo` points at another
checkout (e.g. an older commit in a git worktree) to measure it the same way (what an
older checkout does not record is left out). With --json, the same in the report's shape
(benchmarks/harness/results.py).
"""

import argparse
import json
import os
import re
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, STEP_LINE, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability import span_names as names

_MODEL = re.compile(r"(^|\] )model[: ]")
_ENGINE_STARTS = re.compile(r"meshes up \(engine start ([^)]*)\)")

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


# Trace reading: (track, lane) -> [(span name, start s, end s)], times in seconds since the epoch.
Spans = dict[tuple[str, str], list[tuple[str, float, float]]]
Interval = tuple[float, float]


def trace_spans(trace_file: Path) -> Spans:
    """The spans of a run's trace.json (observability/spans.py writes it), by track and lane."""
    events = json.loads(trace_file.read_text())
    tracks = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    lanes = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    spans: Spans = {}
    for e in events:
        if e.get("ph") == "X":
            key = (tracks[e["pid"]], lanes[(e["pid"], e["tid"])])
            spans.setdefault(key, []).append((e["name"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6))
    return spans


def first(spans: Spans, track: str, lane: str, name: str) -> Interval | None:
    """The earliest span `name` of `track`'s `lane`."""
    found = [(start, end) for n, start, end in spans.get((track, lane), []) if n == name]
    return min(found) if found else None


def role_of(track: str) -> str:
    """The role (mesh/roles.py's name, the controller's lane of its start) of a proc's track:
    "generator 0" -> "generator0", "trainer rank 1" -> "trainer", "replay buffer" -> "replay_buffer"."""
    kind = re.sub(r" rank \d+$", "", track)
    return re.sub(r" (\d+)$", r"\1", kind).replace(" ", "_")


# A proc's own first step after start-up: (label, its lane, the span that starts it, the span that ends it).
FIRST_WORK = {
    "generator": [
        ("first generate", "main", names.DECODE, names.DECODE),
        ("first weight version loaded", "weights", names.SWAP_WEIGHTS, names.SWAP_WEIGHTS),
    ],
    "trainer": [("first train step", "main", names.FORWARD, names.PUBLISH_WEIGHTS)],
}
CONTROLLER = (  # (label, the controller's start-up span)
    ("launch -> run starts (Hydra)", names.LAUNCH),
    ("imports of the training half", names.START_UP_IMPORTS),
    ("initial policy", names.INITIAL_POLICY),
    ("tokenizer and task", names.TOKENIZER_AND_TASK),
    ("meshes start", names.MESHES_START),
)


def breakdown(spans: Spans, engine_starts: list[float]) -> dict[tuple[str, str], Interval]:
    """(process, phase) -> (start, end) in seconds since the controller's launch; empty for a
    run that recorded no start-up spans (an older checkout)."""
    launch = first(spans, "controller", names.START_UP_LANE, names.LAUNCH)
    if launch is None:
        return {}
    zero = launch[0]
    found: dict[tuple[str, str], Interval] = {}
    for label, name in CONTROLLER:
        if (hit := first(spans, "controller", names.START_UP_LANE, name)) is not None:
            found[("controller", label)] = hit
    if (step := first(spans, "controller", names.TRAINER_LOOP_LANE, names.STEP)) is not None:
        found[("controller", "first step")] = step
    procs = sorted({track for track, lane in spans if lane == names.START_UP_LANE} - {"controller"})
    for track in procs:
        found.update({(track, label): hit for label, hit in proc_phases(spans, track, engine_starts).items()})
    return {key: (start - zero, end - zero) for key, (start, end) in found.items()}


def proc_phases(spans: Spans, track: str, engine_starts: list[float]) -> dict[str, Interval]:
    """A proc's spawn, its imports, its actor's spawn and set-up (a generator's engine start
    within it), and its first step's work."""
    found = {}
    for label, name in (("spawn -> bootstrap", names.LAUNCH), ("bootstrap imports", names.START_UP_IMPORTS)):
        if (hit := first(spans, track, names.START_UP_LANE, name)) is not None:
            found[label] = hit
    role = role_of(track)
    ready = first(spans, "controller", role, names.ROLE_START)
    if ready is not None and "bootstrap imports" in found:
        found["actor spawned and set up"] = (found["bootstrap imports"][1], ready[1])
    index = re.fullmatch(r"generator(\d+)", role)
    if ready is not None and index is not None and int(index.group(1)) < len(engine_starts):
        found["engine start"] = (ready[1] - engine_starts[int(index.group(1))], ready[1])
    for label, lane, opens, closes in FIRST_WORK.get(re.sub(r"\d+$", "", role), []):
        start, end = first(spans, track, lane, opens), first(spans, track, lane, closes)
        if start is not None and end is not None:
            found[label] = (start[0], end[1])
    return found


def engine_starts(lines: list[tuple[float, str]]) -> list[float]:
    """Each generator's engine start (s), as the "meshes up" line says it."""
    hit = next((m for _, line in lines if (m := _ENGINE_STARTS.search(line))), None)
    return [] if hit is None else [float(s.rstrip("s")) for s in hit.group(1).split(", ")]


# CPU seconds of the app's processes when its first step is printed
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux: /proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


class CpuAtFirstStep:
    """A console-line callback: at the first step's line, the CPU seconds of every process
    this benchmark started (the app and its procs), by pid, and the box's load (its 1-minute
    load average: how many processes wanted a core, the other jobs' among them)."""

    def __init__(self):
        self.by_pid: dict[int, float] = {}
        self.load = 0.0

    def __call__(self, line: str) -> None:
        if not self.by_pid and STEP_LINE.match(line):
            taken = {pid: cpu_seconds(pid) for pid in descendants(os.getpid())}
            self.by_pid = {pid: cpu for pid, cpu in taken.items() if cpu}
            self.load = os.getloadavg()[0]

    def by_process(self, procs_file: Path) -> dict[str, float]:
        """CPU seconds by process, named as procs.json names them (the controller, each role;
        a trainer's ranks as "trainer rank I"); processes it does not name are summed as "other"."""
        named = {}
        if procs_file.is_file():
            for role, where in json.loads(procs_file.read_text()).items():
                ranks = where if isinstance(where, list) else [where]
                for rank, place in enumerate(ranks):
                    named[place["pid"]] = role if not isinstance(where, list) else f"{role} rank {rank}"
        cpu: dict[str, float] = {}
        for pid, seconds in self.by_pid.items():
            name = named.get(pid, "other")
            cpu[name] = cpu.get(name, 0.0) + seconds
        return cpu


def one_run(repo: Path, steps: int, overrides: list[str]) -> tuple[dict, dict, dict, float]:
    """(console phases, per-process breakdown, CPU seconds at the first step, the box's load
    then) of one run."""
    cpu = CpuAtFirstStep()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        lines = timed_run(repo, steps, overrides, run_dir=run_dir, on_line=cpu)
        trace = run_dir / "trace.json"
        spans = trace_spans(trace) if trace.is_file() else {}
        where = breakdown(spans, engine_starts(lines))
        return phases(lines), where, cpu.by_process(run_dir / "procs.json"), cpu.load


HEADLINES = ("model ready", "first step", "last step -> exit, less the final save")  # the figures of --json


def medians(results: list[dict]) -> dict:
    """Each key's median over the runs that have it (an interval's start and end apart)."""
    keys = list(dict.fromkeys(key for r in results for key in r))
    median: dict = {}
    for key in keys:
        values = [r[key] for r in results if key in r]
        if isinstance(values[0], tuple):
            median[key] = tuple(statistics.median(v[i] for v in values) for i in range(2))
        else:
            median[key] = statistics.median(values)
    return median


def kind(phase: str) -> str:
    return "since launch" if phase in dict(MILESTONES) else "interval"


def result_of(results: list[dict], median: dict, where: dict, cpu: dict, loads: list[float]) -> BenchmarkResult:
    result = BenchmarkResult("startup", "Start-up and teardown", this_command())
    for phase in HEADLINES:
        if phase in median:
            name = f"launch -> {phase}" if kind(phase) == "since launch" else phase
            result.figure(f"{name} (median)", median[phase], "s")
    if cpu:
        result.figure("CPU seconds of all processes at the first step (median)", cpu["all"], "s")
    result.figure("the box's 1-minute load average at the first step (median)", statistics.median(loads), "")
    runs = len(results)
    columns = ["phase", "kind", *(f"run {i + 1} (s)" for i in range(len(results))), "median (s)"]
    rows = [[phase, kind(phase), *(r.get(phase) for r in results), value] for phase, value in median.items()]
    result.tables.append(Table(f"Start-up and teardown, {len(results)} runs", columns, rows))
    if where:
        columns = ["process", "phase", "from (s)", "to (s)", "seconds"]
        rows = [[proc, phase, start, end, end - start] for (proc, phase), (start, end) in ordered(where)]
        result.tables.append(Table(f"Where the first step's time goes, since launch (median of {runs})", columns, rows))
    if cpu:
        rows = [[proc, seconds] for proc, seconds in cpu.items()]
        result.tables.append(Table(f"CPU seconds at the first step (median of {runs})", ["process", "CPU s"], rows))
    milestones = [label for label, _ in MILESTONES if label in median]
    line = Line("median", milestones, [median[label] for label in milestones])
    result.series.append(Series("Start-up milestones", "", "seconds since launch (median)", [line], bars=True))
    return result


def ordered(where: dict[tuple[str, str], Interval]) -> list:
    """The breakdown by process (the controller first), each process's phases by start."""
    return sorted(where.items(), key=lambda item: (item[0][0] != "controller", item[0][0], item[1][0]))


def with_total(cpu: dict[str, float]) -> dict[str, float]:
    return {**cpu, "all": sum(cpu.values())} if cpu else {}


def printed(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"\n{title}:")
    for key, value in rows:
        print(f"  {key:<60} {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("overrides", nargs="*")
    add_json_argument(parser)
    args = parser.parse_args()
    print(f"warm-up run ({args.repo}) ...", flush=True)
    timed_run(args.repo, args.steps, args.overrides)
    results, wheres, cpus, loads = [], [], [], []
    for i in range(args.runs):
        console, where, cpu, load = one_run(args.repo, args.steps, args.overrides)
        results.append(console)
        wheres.append(where)
        cpus.append(with_total(cpu))
        loads.append(load)
        print(f"run {i + 1} (load {load:.1f}): " + ", ".join(f"{k} {v:.1f}s" for k, v in console.items()), flush=True)
    median = medians(results)
    where = medians(wheres) if any(wheres) else {}
    cpu = medians(cpus) if any(cpus) else {}
    printed(
        f"median of {args.runs} runs ({args.steps} steps each)",
        [(f"{key} ({kind(key)})", f"{value:6.1f}s") for key, value in median.items()],
    )
    rows = [
        (f"{proc} | {phase}", f"{start:5.2f} -> {end:5.2f}s ({end - start:.2f}s)")
        for (proc, phase), (start, end) in ordered(where)
    ]
    printed("where the first step's time goes (median, seconds since launch)", rows)
    printed("CPU seconds at the first step (median)", [(proc, f"{s:5.2f}") for proc, s in cpu.items()])
    if args.json:
        result_of(results, median, where, cpu, loads).write(args.json)


if __name__ == "__main__":
    main()
