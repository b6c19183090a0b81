"""Node 0 learns where every other node's Monarch worker listens, and tells them when to go.

A torch.distributed TCPStore on node 0 (MASTER_ADDR:MASTER_PORT) is the meeting
point: node r writes `worker/r` = the address its Monarch worker serves on;
the controller on node 0 waits for all of them (naming the ones that never
come), attaches to them with Monarch, and writes `shutdown` when the run ends.
A node also goes when the store stops answering (node 0 is gone).

A node whose launcher is started again mid-run (the node died and came back) writes
its new worker's address under the same key; the controller reads it (`Registrations`)
and takes the node back.
"""

import socket
import time
from datetime import timedelta

from torch.distributed import TCPStore

from forge_async.errors import ConfigError
from forge_async.cluster.nodes import NodeSpec
from forge_async.process.interpreter import python

_SHUTDOWN = "shutdown"
_POLL_S = 0.5
_RELEASE_WAIT_S = 5.0


class JoinTimeout(ConfigError):
    """A node that never joined the run."""


def _worker_key(rank: int) -> str:
    return f"worker/{rank}"


def _done_key(rank: int) -> str:
    return f"done/{rank}"


def own_address(master_addr: str) -> str:
    """This node's address on the network that reaches node 0 (a UDP 'connect' sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master_addr, 9))
        return probe.getsockname()[0]


class Registrations:
    """The controller's view of the store: where each node's worker registered last."""

    def __init__(self, point: str):
        """`point`: the store's host:port."""
        host, port = point.rsplit(":", 1)
        self.store = TCPStore(host, int(port), is_master=False, wait_for_workers=False, timeout=timedelta(seconds=10))

    def worker(self, rank: int) -> str | None:
        key = _worker_key(rank)
        return self.store.get(key).decode() if self.store.check([key]) else None


class Rendezvous:
    def __init__(self, node: NodeSpec):
        self.node = node
        self.timeout_s = node.join_timeout_s  # how long node 0 waits for the others (and they for it)
        self.store = TCPStore(
            node.master_addr,
            node.master_port,
            is_master=node.node_rank == 0,
            wait_for_workers=False,
            timeout=timedelta(seconds=self.timeout_s),
        )

    def register(self, worker_address: str) -> None:
        self.store.set(_worker_key(self.node.node_rank), worker_address)

    def should_stop(self) -> bool:
        """True once node 0 said so (acknowledged), or stopped answering."""
        try:
            if not self.store.check([_SHUTDOWN]):
                return False
            self.store.set(_done_key(self.node.node_rank), "1")
        except Exception:  # node 0's store is gone: so is the run
            pass
        return True

    def wait_for_workers(self) -> list[str]:
        """Worker addresses of every node, in node order; fails naming the nodes that never came."""
        deadline = time.monotonic() + self.timeout_s
        ranks = range(self.node.nnodes)
        while True:
            missing = [r for r in ranks if not self.store.check([_worker_key(r)])]
            if not missing:
                return [self.store.get(_worker_key(r)).decode() for r in ranks]
            if time.monotonic() > deadline:
                where = f"{self.node.master_addr}:{self.node.master_port}"
                raise JoinTimeout(
                    f"node rank(s) {', '.join(map(str, missing))} of {self.node.nnodes} did not join "
                    f"within {self.timeout_s:.0f}s (launch.join_timeout_s): is "
                    f"`{python()} -m forge_async.cluster --node-rank R ...` running there, and can it reach {where}?"
                )
            time.sleep(_POLL_S)

    def release_workers(self) -> None:
        """Tell every node the run is over; wait (briefly) until they have heard it."""
        self.store.set(_SHUTDOWN, "1")
        deadline = time.monotonic() + _RELEASE_WAIT_S
        others = [_done_key(r) for r in range(1, self.node.nnodes)]
        while not self.store.check(others) and time.monotonic() < deadline:
            time.sleep(0.1)
