"""What a proc's threads run at, for tests/test_launch_config.py (importable in the procs it spawns)."""

import os
from pathlib import Path

from monarch.actor import Actor, endpoint


class ThreadNiceness(Actor):
    @endpoint
    async def niceness(self) -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)  # on Linux: the calling thread's


def write_niceness(path: str) -> None:
    """A prepare step: the niceness of the thread running the bootstrap, into `path`."""
    Path(path).write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
