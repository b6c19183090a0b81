"""Spans of what each actor does, for one timeline of the whole run (RUN_DIR/trace.json).

Each process keeps one Tracer: `with TRACER.span(FORWARD):` records the span's
name (a constant of observability/span_names.py), lane, start and end (wall-clock
ns, the one clock every process and node shares) in a bounded in-memory ring, for
two clock reads and an append per span. The ring keeps the newest MAX_SPANS spans of
the process in flat arrays, 20 bytes a span (a span as a Python tuple would take
several times that): over a long run it fills, and then stays that size (docs/metrics.md,
timeline). At the end of the run the controller collects every actor's spans (the `trace_spans` endpoint of ProcActor)
and writes them as Chrome trace events: one track (process) per actor, one row
(thread) per lane. Perfetto and chrome://tracing open the file; `python -m
forge_async.observability.step_budget RUN_DIR` prints a per-step budget (forge_async/observability/step_budget.py).

Why not Monarch's or torch's own: Monarch's telemetry spans feed its Rust
tracing / SQL-sidecar pipeline (monarch.distributed_telemetry), which needs its
job launcher and has no trace-event export; torch.profiler's record_function
spans exist only inside an active profiler, which records every op (tens of
percent overhead) and one file per process.
"""

import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager

Span = tuple[str, str, int, int]  # name, lane, start ns, end ns (time.time_ns)

# Per process, the newest kept (the default app's controller records 6 a step: its last ~33,000
# steps); 20 bytes each.
MAX_SPANS = 200_000


class Tracer:
    """A ring of the newest `max_spans` spans: starts and ends in two int64 arrays, and the
    (name, lane) pair as an index into the pairs seen (span names and lanes are a small fixed
    set: the code's literals and one lane per worker)."""

    def __init__(self, enabled: bool = True, max_spans: int = MAX_SPANS):
        self.enabled = enabled
        self.max_spans = max_spans
        self._pairs: list[tuple[str, str]] = []  # (name, lane) by index
        self._pair_index: dict[tuple[str, str], int] = {}
        self._clear()

    def _clear(self) -> None:
        self._starts, self._ends, self._kinds = array("q"), array("q"), array("I")
        self._recorded = 0  # spans since the last take, overwritten ones included

    @contextmanager
    def span(self, name: str, lane: str = "main") -> Iterator[None]:
        if not self.enabled:
            yield
            return
        start = time.time_ns()
        try:
            yield
        finally:
            self._record(name, lane, start, time.time_ns())

    def add(self, name: str, start_ns: int, end_ns: int, lane: str = "main") -> None:
        """A span measured by the caller (e.g. one that ends in another callback)."""
        if self.enabled:
            self._record(name, lane, start_ns, end_ns)

    def _record(self, name: str, lane: str, start: int, end: int) -> None:
        kind = self._pair_index.get((name, lane))
        if kind is None:
            kind = self._pair_index[(name, lane)] = len(self._pairs)
            self._pairs.append((name, lane))
        if len(self._starts) < self.max_spans:
            self._starts.append(start)
            self._ends.append(end)
            self._kinds.append(kind)
        else:  # full: overwrite the oldest
            i = self._recorded % self.max_spans
            self._starts[i], self._ends[i], self._kinds[i] = start, end, kind
        self._recorded += 1

    def take(self) -> list[Span]:
        """The spans recorded since the last take, oldest first; the ring is emptied."""
        held = len(self._starts)
        oldest = self._recorded % held if self._recorded > held else 0
        order = [*range(oldest, held), *range(oldest)]
        spans = [(*self._pairs[self._kinds[i]], self._starts[i], self._ends[i]) for i in order]
        self._clear()
        return spans


TRACER = Tracer()  # this process's; the app turns it off with trace.enabled=false


def trace_events(tracks: dict[str, list[Span]]) -> list[dict]:
    """Chrome trace events ("X" complete events, microseconds) with one process per track,
    named after it, and one thread per lane."""
    events: list[dict] = []
    for pid, (track, spans) in enumerate(tracks.items(), start=1):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": track}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        lanes: dict[str, int] = {}
        for name, lane, start, end in spans:
            if lane not in lanes:
                lanes[lane] = len(lanes) + 1
                events.append(
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": lanes[lane], "args": {"name": lane}}
                )
            events.append(
                {"ph": "X", "name": name, "pid": pid, "tid": lanes[lane], "ts": start / 1e3, "dur": (end - start) / 1e3}
            )
    return events
