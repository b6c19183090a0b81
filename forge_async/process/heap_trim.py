"""Give the memory glibc's allocator keeps free back to the system, every half minute.

A long run frees and allocates the same sizes millions of times (tensors of each step,
messages of each call); glibc keeps freed chunks in its heaps for reuse, and their
pages stay resident even when nothing reuses them. In the trainer that free space grew
step after step (benchmarks/pipeline/soak.py: each proc's resident set over a long run).
`malloc_trim(0)` returns every whole free page inside the heaps; a daemon thread in each
process calls it every TRIM_EVERY_S seconds (a few milliseconds each time, under glibc's
own locks). Elsewhere than glibc (musl, macOS) there is nothing to do.
"""

import ctypes
import ctypes.util
import threading
import time

TRIM_EVERY_S = 30.0

_started = threading.Event()


def start_heap_trimmer() -> None:
    """Start this process's trimming thread (once; a no-op without glibc)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "malloc_trim") or _started.is_set():
        return
    _started.set()
    threading.Thread(target=_trim_forever, args=(libc,), name="heap-trim", daemon=True).start()


def _trim_forever(libc: ctypes.CDLL) -> None:
    while True:
        time.sleep(TRIM_EVERY_S)
        libc.malloc_trim(0)
