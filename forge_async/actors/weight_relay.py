"""WeightRelay: brings each published version to a node other than the trainer's, once.

One network copy for the whole node, written into that node's shared-memory channel,
where every generator on the node picks it up by itself between engine steps, exactly
as on the trainer's own node. The copy arrives by one of two ways
(`weights.cross_host`):

- gloo: the WeightSender on the trainer's node sends it over this relay's gloo pair
  (weights/link.py), and a thread of the relay receives each version, writes it into the
  channel once whole and tells the sender: no call per version. A pair that fails ends
  its thread; the next pair starts a new one.
- torchstore: the relay fetches it from the store, where the trainer put it.
"""

import asyncio
import threading

from monarch.actor import endpoint
from torch.distributed import TCPStore

from forge_async.mesh.proc_actor import ProcActor
from forge_async.cluster.hosts import node_address
from forge_async.mesh.reply_port import answers_on_port
from forge_async.weights import scratch
from forge_async.weights.outcomes import LinkFailed, Loaded
from forge_async.weights.link import (
    RELAY,
    Pair,
    ReceivedVersion,
    Rendezvous,
    join_rendezvous,
    open_pair,
    relay_version,
)
from forge_async.weights.shared_memory import SharedMemoryChannel


class WeightRelay(ProcActor):
    def __init__(self, channel_dir: str, node: int):
        self.channel = SharedMemoryChannel(scratch.claim(channel_dir))
        self.node = node
        self.writing = threading.Lock()  # one pair's thread writes the channel at a time
        self.store: TCPStore | None = None  # the sender's rendezvous, once joined
        self.timeout_s = 0.0

    @endpoint
    async def join(self, point: Rendezvous, timeout_s: float) -> None:
        """Reach the sender's rendezvous point (gloo)."""
        self.timeout_s = timeout_s
        self.store = await asyncio.to_thread(join_rendezvous, point, timeout_s)

    @endpoint
    async def open_pair(self, attempt: int) -> LinkFailed | None:
        """Open this relay's side of its pair with the sender and receive over it from now on;
        LinkFailed if it does not open."""
        if self.store is None:
            raise RuntimeError("open_pair before join: this relay has no rendezvous to open its pair at")
        try:
            pair = await asyncio.to_thread(
                open_pair, self.store, self.node, attempt, RELAY, node_address(), self.timeout_s
            )
        except RuntimeError as err:
            return LinkFailed(f"could not connect: {err}")
        threading.Thread(target=self._receive_forever, args=(pair,), name=f"relay pair {attempt}", daemon=True).start()
        return None

    def _receive_forever(self, pair: Pair) -> None:
        """Every version the sender sends over `pair` into this node's channel, until the pair fails
        (the sender reports it; a new pair gets a new thread, with a buffer of its own)."""
        received = ReceivedVersion()
        while True:
            try:
                relay_version(pair, received, self.channel, self.writing)
            except RuntimeError:
                return

    @endpoint
    @answers_on_port
    async def load_version(self, version: int) -> Loaded:
        """`version` from torchstore into this node's channel."""
        from forge_async.weights import store  # imported as the proc starts (mesh/procs.py, PRELOAD)

        self.channel.write(version, await store.get_policy(version))
        return Loaded(version)

    @endpoint
    async def remove_channel(self) -> None:
        self.channel.remove()
