"""A Monarch actor that can say where it runs, for procs.json, placement and error messages."""

import os
import socket
from dataclasses import dataclass

from monarch.actor import Actor, endpoint

from forge_async.cluster.hosts import free_port, node_address, node_rank


@dataclass(frozen=True)
class Where:
    """Where a proc runs: its node rank and address (as the launcher numbered them), host name and pid."""

    node: int
    addr: str
    host: str
    pid: int


def here() -> Where:
    """Where this process runs."""
    return Where(node_rank(), node_address(), socket.gethostname(), os.getpid())


class LocatedActor(Actor):
    @endpoint
    async def where(self) -> Where:
        """Where this actor's proc runs: `here()`."""
        return here()

    @endpoint
    async def free_address(self) -> tuple[str, int]:
        """This node's address and a port free on it now (a rendezvous point for torch.distributed)."""
        return node_address(), free_port(node_address())
