"""Heavy imports without the garbage collector's passes over them.

Importing vLLM, torch and TorchTitan creates about a million objects, and the collector
walks them all over and over as they appear (a full pass each time the oldest generation
grows enough): in a generator proc, a sizeable share of its imports and of vLLM's engine
start. Nearly all of these objects live as long as the process, so the collector is off
while they are made, then they are frozen: moved where later passes never look. The
garbage the imports leave is small and kept (docs/benchmarks.md, start-up).
"""

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def frozen() -> Iterator[None]:
    """The collector off inside the block (for code that imports), then everything alive frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def import_frozen(*modules: str) -> None:
    """Import `modules` with the collector off, then freeze everything alive."""
    with frozen():
        for module in modules:
            importlib.import_module(module)
