"""The base of every forge_async actor: the only actor in its proc, able to say where it runs
and what it did (its spans, see observability/spans.py)."""

import os

from monarch.actor import endpoint

from forge_async.mesh.located import LocatedActor
from forge_async.observability.spans import TRACER, Span


class ProcActor(LocatedActor):
    @endpoint
    async def trace_spans(self) -> list[Span]:
        """This proc's spans since the last call (the proc has one actor: they are its own)."""
        return TRACER.take()

    async def __cleanup__(self, exc: Exception | None) -> None:
        """On a requested stop, end the proc at once.

        Everything the run keeps was saved before the stop; what the interpreter would do
        at exit (vLLM's engine shutdown runs a full garbage collection over its heap) only
        delays the end of the run by seconds. After a failure the proc is left to Monarch,
        which reports it.
        """
        if exc is None:
            os._exit(0)
