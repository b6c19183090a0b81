"""Where each millisecond of a training step went, from a run's trace.json (see observability/spans.py).

    python -m forge_async.observability.step_budget RUN_DIR [--skip 10]

A step is one of the controller's "step" spans: from the moment the trainer loop
asks for a batch to the moment the step's metrics are logged. For every step
after the first `--skip` (start-up: first weights, warm caches), each track's
time inside the step is summed per span name and the medians are printed: what
the trainer did (forward, backward, optimizer, publish weights) and did not
(idle), what each generator did (decode, swap weights), where the controller
waited. The *bubble* is the part of a step in which neither the trainer nor any
generator did useful work: the pipeline stalled on RPCs, admission or scheduling.
For each generator, its idle time while a rollout worker was held back by admission
control is what the age bound cost generation: a worker held back while the generator
is busy with another worker's call loses nothing.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from forge_async.observability import span_names
from forge_async.observability.span_names import HELD_BACK, TRAINER_LOOP_LANE

STEP = ("controller", TRAINER_LOOP_LANE, span_names.STEP)
USEFUL = {
    span_names.FORWARD,
    span_names.BACKWARD,
    span_names.OPTIMIZER,
    span_names.PUBLISH_WEIGHTS,
    span_names.DECODE,
    span_names.SWAP_WEIGHTS,
}

Interval = tuple[float, float]  # microseconds


class TraceError(ValueError):
    """A run dir without a readable trace.json."""


def read_trace(run_dir: Path) -> list[dict]:
    """The trace events; a file cut short (a crashed run) may lack its closing bracket."""
    path = Path(run_dir) / "trace.json"
    if not path.is_file():
        raise TraceError(f"no trace.json in {run_dir} (was the run made with trace.enabled=false?)")
    text = path.read_text().rstrip().rstrip(",")
    try:
        return json.loads(text if text.endswith("]") else text + "]")
    except json.JSONDecodeError as err:
        raise TraceError(f"{path} is not trace-event JSON: {err}") from None


def spans_by_lane(events: list[dict]) -> dict[tuple[str, str], list[tuple[str, float, float]]]:
    """(track, lane) -> [(name, start, end)] from complete ("X") events and their name metadata."""
    tracks, lanes = {}, {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "process_name":
            tracks[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_name":
            lanes[(e["pid"], e["tid"])] = e["args"]["name"]
    out = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            key = (tracks.get(e["pid"], str(e["pid"])), lanes.get((e["pid"], e["tid"]), str(e["tid"])))
            out[key].append((e["name"], e["ts"], e["ts"] + e["dur"]))
    return out


def union_length(intervals: list[Interval]) -> float:
    """Length of the union of the intervals (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _clip(spans: list[tuple[str, float, float]], window: Interval) -> list[tuple[str, float, float]]:
    lo, hi = window
    return [(n, max(s, lo), min(e, hi)) for n, s, e in spans if e > lo and s < hi]


ALL_LANES = "all lanes"
IDLE_HELD_BACK = "idle, a request held back"  # a generator idle while admission holds a worker back


def step_budget(lanes: dict, window: Interval) -> dict[str, float]:
    """Milliseconds per "track | lane | span name" inside one step window, plus each lane's
    idle time, each actor's idle time in all its lanes at once ("track | all lanes | idle",
    for actors with more than one lane: a generator swapping weights is idle in its main
    lane, not idle as a whole), a generator's idle time while admission held a request back,
    and the bubble."""
    budget: dict[str, float] = defaultdict(float)
    useful: list[Interval] = []
    busy_by_track: dict[str, list[list[Interval]]] = defaultdict(list)
    length = window[1] - window[0]
    for (track, lane), spans in lanes.items():
        inside = [s for s in _clip(spans, window) if (track, lane, s[0]) != STEP]
        if not inside:
            continue
        for name, start, end in inside:
            budget[f"{track} | {lane} | {name}"] += (end - start) / 1e3
            if name in USEFUL and track != "controller":
                useful.append((start, end))
        busy = [(s, e) for _, s, e in inside]
        budget[f"{track} | {lane} | idle"] += (length - union_length(busy)) / 1e3
        busy_by_track[track].append(busy)
    held = [
        (s, e)
        for (track, _), spans in lanes.items()
        if track == "controller"
        for name, s, e in _clip(spans, window)
        if name == HELD_BACK
    ]
    for track in {track for track, _ in lanes} - {"controller"}:  # a generator with no span this step too
        budget.update(_actor_idle(track, busy_by_track.get(track, []), held, length))
    budget["step"] = length / 1e3
    budget["bubble"] = (length - union_length(useful)) / 1e3
    return budget


def _actor_idle(track: str, busy_by_lane: list[list[Interval]], held: list[Interval], length: float) -> dict:
    """An actor's idle time in all its lanes at once (if it has several) and, for a generator,
    the part of it while a rollout worker was held back by admission."""
    busy = [i for lane in busy_by_lane for i in lane]
    idle = {}
    if len(busy_by_lane) > 1:
        idle[f"{track} | {ALL_LANES} | idle"] = (length - union_length(busy)) / 1e3
    if held and track.startswith("generator"):  # idle and held = (held or busy) - busy
        idle[f"{track} | {ALL_LANES} | {IDLE_HELD_BACK}"] = (union_length(busy + held) - union_length(busy)) / 1e3
    return idle


def budget(run_dir: Path, skip: int = 10) -> dict:
    """Median milliseconds per item over the steady-state steps, and how many steps that was."""
    lanes = spans_by_lane(read_trace(run_dir))
    steps = sorted((s, e) for name, s, e in lanes.get(STEP[:2], []) if name == STEP[2])
    if not steps:
        raise TraceError(f"{run_dir}/trace.json holds no training step")
    steady = steps[skip:] if len(steps) > skip else steps
    per_step = [step_budget(lanes, w) for w in steady]
    keys = {k for b in per_step for k in b}
    medians = {k: statistics.median(b.get(k, 0.0) for b in per_step) for k in keys}
    return {"steps": len(steps), "steady_steps": len(steady), "median_ms": medians}


def format_budget(result: dict) -> str:
    m = result["median_ms"]
    lines = [
        f"{result['steady_steps']} steady-state steps of {result['steps']}; median per step, ms "
        "(each item's own median: they need not add up)",
        f"  {'step':<58} {m['step']:8.1f}  ({1e3 / m['step']:.1f} steps/s)",
    ]
    rows = sorted(k for k in m if " | " in k)
    for key in rows:
        share = 100 * m[key] / m["step"]
        lines.append(f"  {key:<58} {m[key]:8.1f}  {share:4.0f}%")
    lines.append(
        f"  {'bubble (neither the trainer nor a generator busy)':<58} {m['bubble']:8.1f}"
        f"  {100 * m['bubble'] / m['step']:4.0f}%"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--skip", type=int, default=10, help="start-up steps left out (default 10)")
    args = parser.parse_args()
    try:
        print(format_budget(budget(args.run_dir, args.skip)))
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
