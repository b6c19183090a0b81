"""A Monarch actor that can say where it runs (host and pid), for procs.json and error messages."""

import os
import socket

from monarch.actor import Actor, endpoint


class LocatedActor(Actor):
    @endpoint
    async def where(self) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid()}
