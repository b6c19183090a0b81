"""An actor answering on a caller's port, for tests/test_reply_port.py (importable in the procs it spawns)."""

import asyncio
import os

from monarch.actor import Actor, concurrent_endpoint, endpoint

from forge_async.mesh.reply_port import answers_on_port


class Echo(Actor):
    @concurrent_endpoint
    @answers_on_port
    async def echo(self, value: int, delay_s: float = 0.0, factor: int = 1) -> int:
        await asyncio.sleep(delay_s)
        if value < 0:
            raise ValueError(f"no negative values: {value}")
        return value * factor

    @endpoint
    async def where(self) -> int:
        return os.getpid()
