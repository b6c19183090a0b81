"""Spans of what each actor does, for one timeline of the whole run (RUN_DIR/trace.json).

Each process keeps one Tracer: `with tracer.span("generate"):` records the
span's name, lane, start and end (wall-clock ns, the one clock every process and
node shares) in a bounded in-memory ring, at about a microsecond per span. At the
end of the run the controller collects every actor's spans (the `trace_spans`
endpoint of ProcActor) and writes them as Chrome trace events: one track
(process) per actor, one row (thread) per lane. Perfetto and chrome://tracing
open the file; `python -m forge_async.trace RUN_DIR` prints a per-step budget
(forge_async/trace.py).

Why not Monarch's or torch's own: Monarch's telemetry spans feed its Rust
tracing / SQL-sidecar pipeline (monarch.distributed_telemetry), which needs its
job launcher and has no trace-event export; torch.profiler's record_function
spans exist only inside an active profiler, which records every op (tens of
percent overhead) and one file per process.
"""

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

Span = tuple[str, str, int, int]  # name, lane, start ns, end ns (time.time_ns)

MAX_SPANS = 200_000  # per process: the newest are kept (a days-long run keeps its last hours)


@dataclass
class TraceConfig:
    enabled: bool = True  # spans of every actor -> RUN_DIR/trace.json (cheap enough to stay on)


class Tracer:
    def __init__(self, enabled: bool = True, max_spans: int = MAX_SPANS):
        self.enabled = enabled
        self._spans: deque[Span] = deque(maxlen=max_spans)

    @contextmanager
    def span(self, name: str, lane: str = "main") -> Iterator[None]:
        if not self.enabled:
            yield
            return
        start = time.time_ns()
        try:
            yield
        finally:
            self._spans.append((name, lane, start, time.time_ns()))

    def add(self, name: str, start_ns: int, end_ns: int, lane: str = "main") -> None:
        """A span measured by the caller (e.g. one that ends in another callback)."""
        if self.enabled:
            self._spans.append((name, lane, start_ns, end_ns))

    def take(self) -> list[Span]:
        """The spans recorded since the last take, oldest first; the ring is emptied."""
        spans = list(self._spans)
        self._spans.clear()
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
