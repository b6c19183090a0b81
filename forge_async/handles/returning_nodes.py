"""Generator nodes that come back: a node lost mid-run (its generators and weight relay
lost with it, handles/generators/) whose launcher is started again takes its place
in the run.

The node's new launcher registers a new Monarch worker at the rendezvous
(cluster/rendezvous.py). While the run goes on, the controller looks every few seconds
for lost nodes with a new worker; for each it attaches to the worker, spawns the node's
weight relay and generators there, and brings them the newest version; work goes
to the generators once their weights are recent enough for admission control, as for
any generator. A node that cannot be taken back (its worker vanished again, a spawn
failed) is said in one line and stays lost; a later registration is tried again.
"""

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from forge_async.handles.run import RunHandles
from forge_async.mesh.supervision import within
from forge_async.weights.delivery import WeightDelivery

WATCH_S = 2.0
ATTACH_TIMEOUT_S = 30.0  # a worker that registered and died since never answers the attach
_TAKE_BACK_TIMEOUT_S = 300.0  # a generator's engine start on a busy node


class ReturningNodes:
    def __init__(self, handles: RunHandles, delivery: WeightDelivery):
        self.hosts = handles.procs_file.hosts
        self.generators = handles.generators
        self.relays = handles.relays
        self.delivery = delivery
        self._tried: set[str] = set()  # worker addresses a take-back failed on

    def lost_nodes(self) -> list[int]:
        """Nodes whose generators are all lost, and the weight receivers serving them with them."""
        nodes = {self.generators.node_of(i) for i in self.generators.lost}
        return sorted(n for n in nodes if self._all_lost(n))

    def _all_lost(self, node: int) -> bool:
        generators = self.generators.on_node(node)
        return all(i in self.generators.lost for i in generators) and self._receivers(node) <= self.delivery.lost

    def _receivers(self, node: int) -> set[int]:
        """The receivers serving node `node`: its weight relay, or (torchstore transport) its generators."""
        receiver_of = self.delivery.route.receiver_of
        return {r for i in self.generators.on_node(node) if (r := receiver_of[i]) is not None}

    async def watch(self) -> None:
        """Take back each lost node whose launcher registered a new worker, until cancelled."""
        while True:
            await asyncio.sleep(WATCH_S)
            for node in self.lost_nodes():
                address = await asyncio.to_thread(self.hosts.returned_worker, node)
                if address is not None and address not in self._tried:
                    await self._take_back(node, address)

    async def _take_back(self, node: int, address: str) -> None:
        print(f"node {node} is back ({address}): spawning its weight relay and generators ...", flush=True)
        started = asyncio.get_running_loop().time()
        try:
            await within(self._spawn_again(node, address), _TAKE_BACK_TIMEOUT_S)
        except Exception as err:
            self._tried.add(address)
            print(
                f"warning: node {node} could not be taken back: {type(err).__name__} {err}; it stays lost",
                file=sys.stderr,
                flush=True,
            )
            return
        print(
            f"node {node} taken back in {asyncio.get_running_loop().time() - started:.1f}s: "
            f"the run goes on with generators {self.generators.live()}",
            flush=True,
        )

    async def _spawn_again(self, node: int, address: str) -> None:
        """The node's roles spawned on its new worker, each receiver brought the newest version."""
        try:
            await within(self.hosts.attach_again(node, address), ATTACH_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(f"its worker at {address} did not answer within {ATTACH_TIMEOUT_S:.0f}s") from None
        receivers = sorted(self._receivers(node))
        if self.delivery.route.receivers_are_generators:  # torchstore transport: they load versions themselves
            await self._spawn_generators(node)
            for index in receivers:
                self.delivery.take_back(index)
            return
        for index in receivers:  # the relay first: its generators are counted on at the version it holds
            await self.relays.spawn(index)
            self.delivery.take_back(index)
        await self._spawn_generators(node)

    async def _spawn_generators(self, node: int) -> None:
        await asyncio.gather(*(self.generators.take_back(i) for i in self.generators.on_node(node)))


@asynccontextmanager
async def taking_back_nodes(handles: RunHandles, delivery: WeightDelivery) -> AsyncIterator[None]:
    """Lost generator nodes taken back while the block runs (runs launched on several nodes)."""
    if handles.procs_file.hosts.rendezvous is None:
        yield
        return
    watcher = asyncio.create_task(ReturningNodes(handles, delivery).watch())
    try:
        yield
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
