"""The run's nodes as Monarch host meshes, by node rank.

Without the launcher there is one node: this host. Under `python -m
forge_async.cluster`, every node (node 0 too) serves a Monarch worker, the
launcher puts their addresses in FORGE_ASYNC_WORKERS, and the controller
attaches to all of them: node r is host r of one host mesh, so meshes that
span nodes (an FSDP trainer on nodes 0 and 1) are one proc mesh.

A node lost mid-run whose launcher is started again registers a new worker at the
rendezvous (cluster/rendezvous.py); `returned_worker` finds it and `attach_again` makes
it that node from then on (handles/returning_nodes.py brings its roles back).
"""

import fcntl
import os
import socket
import struct
from typing import TYPE_CHECKING

from monarch.actor import HostMesh, attach_to_workers, this_host

if TYPE_CHECKING:
    from forge_async.cluster.rendezvous import Registrations

NODE_RANK_ENV = "FORGE_ASYNC_NODE_RANK"  # set in every process the launcher starts
NODE_ADDR_ENV = "FORGE_ASYNC_NODE_ADDR"  # this node's address on the run's network
WORKERS_ENV = "FORGE_ASYNC_WORKERS"  # node 0: comma-separated worker addresses, node order
RENDEZVOUS_ENV = "FORGE_ASYNC_RENDEZVOUS"  # node 0: the rendezvous store (host:port), where nodes register


def node_rank() -> int:
    return int(os.environ.get(NODE_RANK_ENV, "0"))


def node_address() -> str:
    return os.environ.get(NODE_ADDR_ENV, "127.0.0.1")


def interface_of(address: str) -> str | None:
    """The name of the network interface holding IPv4 `address` (e.g. "eth0"), if any."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                info = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:  # no IPv4 address on this interface
                continue
        if socket.inet_ntoa(info[20:24]) == address:
            return name
    return None


def pin_collectives_to_node_address() -> None:
    """Make gloo / NCCL use this node's run address, not whatever the host name resolves to
    (often 127.0.1.1): sets GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME unless the user did."""
    if NODE_ADDR_ENV not in os.environ:
        return
    interface = interface_of(node_address())
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", interface)


def free_port(address: str) -> int:
    """A TCP port free on `address` now."""
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class Hosts:
    def __init__(self, workers: list[str], rendezvous: str | None = None):
        """`workers`: each node's worker address; `rendezvous`: host:port of the store they
        registered in (None: no node can come back)."""
        self.workers = workers
        self.rendezvous = rendezvous
        self._mesh: HostMesh | None = None
        self._attached_again: dict[int, HostMesh] = {}  # nodes that came back, each its own host mesh
        self._registrations: Registrations | None = None

    @classmethod
    def from_env(cls) -> "Hosts":
        workers = os.environ.get(WORKERS_ENV, "")
        return cls([w for w in workers.split(",") if w], os.environ.get(RENDEZVOUS_ENV) or None)

    @property
    def nnodes(self) -> int:
        return max(1, len(self.workers))

    async def start(self) -> None:
        """Attach to every node's worker (several nodes only)."""
        if not self.workers:
            return
        from monarch.config import configure

        # Remote workers must reach the controller: listen on this node's address, not a unix socket.
        configure(default_transport=f"tcp://{node_address()}:0")
        self._mesh = attach_to_workers(ca="trust_all_connections", workers=self.workers, name="nodes")
        await self._mesh.initialized

    def reachable(self, rank: int, timeout_s: float = 3.0) -> bool:
        """Whether node `rank`'s Monarch worker still accepts connections (one host: always)."""
        if not self.workers:
            return True
        host, port = self.workers[rank].removeprefix("tcp://").rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError:
            return False
        return True

    def returned_worker(self, rank: int) -> str | None:
        """The worker node `rank` registered after the run attached to it, if any: its launcher
        was started again (the node came back). Blocks on the store briefly."""
        if self.rendezvous is None:
            return None
        if self._registrations is None:
            from forge_async.cluster.rendezvous import Registrations  # torch: only where nodes can return

            self._registrations = Registrations(self.rendezvous)
        address = self._registrations.worker(rank)
        return None if address in (None, self.workers[rank]) else address

    async def attach_again(self, rank: int, address: str) -> None:
        """Node `rank`'s new worker at `address`, as that node from now on."""
        name = f"node{rank}_again{len(self._attached_again)}"
        mesh = attach_to_workers(ca="trust_all_connections", workers=[address], name=name)
        await mesh.initialized
        self._attached_again[rank] = mesh
        self.workers[rank] = address

    def nodes(self, first: int, last: int) -> HostMesh:
        """Nodes first..last (consecutive) as one host mesh."""
        if self._mesh is None:
            return this_host()
        return self._mesh.slice(hosts=slice(first, last + 1))

    def node(self, rank: int) -> HostMesh:
        if rank in self._attached_again:
            return self._attached_again[rank]
        return self.nodes(rank, rank)
