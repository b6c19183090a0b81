"""A Monarch actor that can say where it runs, for procs.json, placement and error messages."""

import os
import socket

from monarch.actor import Actor, endpoint

from forge_async.mesh.hosts import free_port, node_address, node_rank


def here() -> dict:
    """This process's node rank and address (as the launcher numbered them), host name and pid."""
    return {"node": node_rank(), "addr": node_address(), "host": socket.gethostname(), "pid": os.getpid()}


class LocatedActor(Actor):
    @endpoint
    async def where(self) -> dict:
        """Where this actor's proc runs: `here()`."""
        return here()

    @endpoint
    async def free_address(self) -> tuple[str, int]:
        """This node's address and a port free on it now (a rendezvous point for torch.distributed)."""
        return node_address(), free_port(node_address())
