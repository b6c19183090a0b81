"""WeightSender: on the trainer's host, sends each new version to the weight relay of
every other generator host, over a gloo pair per relay (weights/link.py).

The trainer only writes its host's shared-memory channel (memory speed) and trains on;
the sender copies the newest version out of that channel and sends it, one network
copy per host. Sends to different hosts run at once, each at its own link's pace: a
slow host receives fewer versions (skipping to the newest each time), never slows the
trainer or another host.
"""

import asyncio
import time

from monarch.actor import concurrent_endpoint, endpoint

from forge_async.actors.proc_actor import ProcActor
from forge_async.launch.hosts import free_port, node_address
from forge_async.reply_port import answers_on_port
from forge_async.weights import scratch
from forge_async.weights.link import SENDER, Rendezvous, StagedVersions, open_pair, send_version, serve_rendezvous
from forge_async.weights.shared_memory import SharedMemoryChannel


class WeightSender(ProcActor):
    def __init__(self, channel_dir: str, timeout_s: float):
        self.staged = StagedVersions(SharedMemoryChannel(scratch.claim(channel_dir)))
        self.timeout_s = timeout_s
        self.store = None
        self.pairs: dict[int, object] = {}

    @endpoint
    async def rendezvous(self) -> Rendezvous:
        """Listen for the relays on this host's address; returns where."""
        address = node_address()
        port = free_port(address)
        self.store = serve_rendezvous(address, port, self.timeout_s)
        return Rendezvous(address, port)

    @concurrent_endpoint
    async def open_pair(self, relay: int, attempt: int) -> dict:
        """Open relay `relay`'s pair (the relay opens its side at the same time); {"error"} if it fails."""
        self.pairs.pop(relay, None)
        try:
            self.pairs[relay] = await asyncio.to_thread(
                open_pair, self.store, relay, attempt, SENDER, node_address(), self.timeout_s
            )
        except RuntimeError as err:
            return {"error": f"could not connect: {err}"}
        return {}

    @concurrent_endpoint
    @answers_on_port
    async def send(self, relay: int) -> dict:
        """The newest published version to relay `relay`: {"version", "bytes", "send_ms"}, or {"error"}
        (the pair is then dropped: it must be opened again)."""
        staged = self.staged.acquire()  # in the actor's thread: staging is never raced
        start = time.perf_counter()
        try:
            sent = await asyncio.to_thread(send_version, self.pairs[relay], staged)
        except RuntimeError as err:
            del self.pairs[relay]
            return {"error": str(err)}
        finally:
            self.staged.release(staged)
        return {"version": staged.version, "bytes": sent, "send_ms": (time.perf_counter() - start) * 1e3}
