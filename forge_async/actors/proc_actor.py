"""The base of every forge_async actor: the only actor in its proc, able to say where it runs."""

import os

from forge_async.actors.located import LocatedActor


class ProcActor(LocatedActor):
    async def __cleanup__(self, exc: Exception | None) -> None:
        """On a requested stop, end the proc at once.

        Everything the run keeps was saved before the stop; what the interpreter would do
        at exit (vLLM's engine shutdown runs a full garbage collection over its heap) only
        delays the end of the run by seconds. After a failure the proc is left to Monarch,
        which reports it.
        """
        if exc is None:
            os._exit(0)
