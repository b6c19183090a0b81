"""WeightSender: on the trainer's host, sends each new version to the weight relay of
every other generator host, over a gloo pair per relay (weights/link.py).

The trainer only writes its host's shared-memory channel (memory speed) and trains on.
The sender hears each publish on the channel's doorbell, copies the newest version out
of the channel and sends it, one network copy per host, with no call per version: a
thread per pair sends every newest version as it comes and reports each one's arrival
(or the pair's failure) on the port the controller gave when the pair opened. Sends to
different hosts run at once, each at its own link's pace: a slow host receives fewer
versions (skipping to the newest each time), never slows the trainer or another host.
"""

import asyncio
import threading
import time

from monarch.actor import Port, concurrent_endpoint, endpoint
from torch.distributed import TCPStore

from forge_async.mesh.proc_actor import ProcActor
from forge_async.cluster.hosts import free_port, node_address
from forge_async.weights import scratch
from forge_async.weights.outcomes import LinkFailed, Sent
from forge_async.weights.link import (
    SENDER,
    Pair,
    Rendezvous,
    StagedVersions,
    open_pair,
    send_version,
    serve_rendezvous,
)
from forge_async.weights.shared_memory import SharedMemoryChannel

_WAIT_S = 1.0  # how often a pair's thread looks up from waiting, to see whether it was replaced


class WeightSender(ProcActor):
    def __init__(self, channel_dir: str, timeout_s: float):
        self.staged = StagedVersions(SharedMemoryChannel(scratch.claim(channel_dir)))
        self.timeout_s = timeout_s
        self.store: TCPStore | None = None  # the rendezvous the relays join, once served
        self.attempts: dict[int, int] = {}  # relay -> the attempt of its pair that sends

    @endpoint
    async def rendezvous(self) -> Rendezvous:
        """Listen for the relays on this host's address; returns where."""
        address = node_address()
        port = free_port(address)
        self.store = serve_rendezvous(address, port, self.timeout_s)
        return Rendezvous(address, port)

    @concurrent_endpoint
    async def open_pair(self, relay: int, attempt: int, reports: Port) -> LinkFailed | None:
        """Open relay `relay`'s pair (the relay opens its side at the same time), then send it every
        newest version from now on, reporting each to `reports` as `(relay, attempt, Sent)`, or the
        pair's failure as `(relay, attempt, LinkFailed)` (it is then done with: a new attempt opens
        a new pair). Returns LinkFailed if the pair does not open."""
        if self.store is None:
            raise RuntimeError("open_pair before rendezvous: the relays have nowhere to meet the sender")
        self.attempts[relay] = attempt  # an older pair's thread stops before its next version
        try:
            pair = await asyncio.to_thread(
                open_pair, self.store, relay, attempt, SENDER, node_address(), self.timeout_s
            )
        except RuntimeError as err:
            return LinkFailed(f"could not connect: {err}")
        threading.Thread(
            target=self._send_forever, args=(relay, attempt, pair, reports), name=f"pair {relay}.{attempt}", daemon=True
        ).start()
        return None

    def _send_forever(self, relay: int, attempt: int, pair: Pair, reports: Port) -> None:
        sent = 0
        while True:
            staged = self.staged.acquire_newer(sent, _WAIT_S)
            if self.attempts.get(relay) != attempt:  # a newer pair sends to this relay now
                if staged is not None:
                    self.staged.release(staged)
                return
            if staged is None:
                continue
            start = time.perf_counter()
            try:
                nbytes = send_version(pair, staged)
            except RuntimeError as err:
                reports.send((relay, attempt, LinkFailed(str(err))))
                return
            finally:
                self.staged.release(staged)
            sent = staged.version
            reports.send((relay, attempt, Sent(sent, nbytes, (time.perf_counter() - start) * 1e3)))
