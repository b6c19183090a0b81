"""The pace each generator keeps, and the routing choice made from it (`by_finish_time`)."""

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager


class BusyClock:
    """Wall time during which at least one call is in flight (`with clock:` around each)."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._since = 0.0
        self._busy_s = 0.0

    def __enter__(self) -> None:
        if self._in_flight == 0:
            self._since = time.perf_counter()
        self._in_flight += 1

    def __exit__(self, *exc) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy_s += time.perf_counter() - self._since

    @property
    def busy_s(self) -> float:
        running = time.perf_counter() - self._since if self._in_flight else 0.0
        return self._busy_s + running


class Pace:
    """One generator's work: samples asked and not yet returned, samples returned, time busy."""

    def __init__(self) -> None:
        self.busy = BusyClock()  # busy while a generate call to it is in flight
        self.outstanding = 0  # samples asked of it and not yet returned
        self.returned = 0  # samples it returned, over the run

    @contextmanager
    def generating(self, samples: int) -> Iterator[None]:
        """Around one generate call of `samples`: counted outstanding at once (the next routing
        choice sees them), returned if the call succeeds."""
        self.outstanding += samples
        try:
            with self.busy:
                yield
            self.returned += samples
        finally:
            self.outstanding -= samples

    def samples_per_s(self) -> float | None:
        """Samples returned per second with a call in flight; None before the first returned."""
        return self.returned / self.busy.busy_s if self.returned else None


def by_finish_time(paces: dict[int, Pace], size: int) -> list[int]:
    """The generators of `paces` (by index), soonest first to finish `size` more samples: each
    one's samples in flight plus `size`, at its pace so far (one not yet measured is taken at the
    others' mean pace, or all alike). Ties: the lowest index."""
    measured = {i: p for i, pace in paces.items() if (p := pace.samples_per_s()) is not None}
    unknown = statistics.fmean(measured.values()) if measured else 1.0
    return sorted(paces, key=lambda i: ((paces[i].outstanding + size) / measured.get(i, unknown), i))
