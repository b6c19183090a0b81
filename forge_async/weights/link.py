"""One version of the weights across a network link: a gloo pair between the weight
sender on the trainer's host and the weight relay of one generator host.

A version travels as the bytes of a shared-memory slot (shared_memory.py): the sender
copies the newest published slot out of the trainer's channel (holding its lock only
for that copy, so the trainer never waits on the network), then sends, in chunks of
`CHUNK_BYTES`, a small frame (version, header length, size), the slot's JSON header
and its tensor bytes. The relay, which receives in a loop of its own, takes it into a
buffer of its own, writes it into its host's channel only once every byte has arrived,
and answers with the version written: the sender's send returns when the version is in
the relay's channel, with no call to the relay. A link that stalls or breaks
mid-version leaves that host on the version it had, and nothing half-received is ever
published.

Each pair is a `ProcessGroupGloo` of two ranks (sender 0, relay 1) of its own,
rendezvousing through the sender's TCPStore under a prefix naming the relay and the
attempt: pairs are independent (a slow host never holds up another) and a broken pair
is replaced by a fresh one, never reused.
"""

import datetime
import os
from dataclasses import dataclass
from threading import Condition, Lock, Thread
from typing import Protocol, cast

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo, Store, TCPStore, Work

from forge_async.weights.shared_memory import SharedMemoryChannel

CHUNK_BYTES = 16 << 20  # a stall is noticed within one chunk's timeout
SENDER, RELAY = 0, 1


class Pair(Protocol):
    """What a link uses of its ProcessGroupGloo: point-to-point sends and receives, which every
    backend has at run time but torch's stubs declare on ProcessGroup only."""

    def send(self, tensors: list[torch.Tensor], dst_rank: int, tag: int) -> Work: ...

    def recv(self, tensors: list[torch.Tensor], src_rank: int, tag: int) -> Work: ...


@dataclass(frozen=True)
class Rendezvous:
    """Where pairs meet: the sender's TCPStore."""

    address: str
    port: int


def serve_rendezvous(address: str, port: int, timeout_s: float) -> TCPStore:
    """The sender's store, listening on its host's address."""
    return TCPStore(address, port, is_master=True, wait_for_workers=False, timeout=_delta(timeout_s))


def join_rendezvous(point: Rendezvous, timeout_s: float) -> TCPStore:
    return TCPStore(point.address, point.port, is_master=False, timeout=_delta(timeout_s))


def open_pair(store: Store, relay: int, attempt: int, rank: int, own_address: str, timeout_s: float) -> Pair:
    """The gloo pair of relay `relay` (blocks until the other side opens it too)."""
    # The options class gloo's constructor takes at run time; torch's stubs know only `Options`.
    options = ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._timeout = _delta(timeout_s)
    options._devices = [ProcessGroupGloo.create_device(hostname=own_address)]
    pair = ProcessGroupGloo(PrefixStore(f"relay{relay}/attempt{attempt}", store), rank, 2, options)
    return cast(Pair, pair)  # its send and recv are Backend's, missing from the stubs


def _delta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


@dataclass
class StagedVersion:
    version: int
    header: bytes
    buffer: torch.Tensor  # the slot file's bytes
    users: int = 0  # sends in progress from it


class StagedVersions:
    """The sender's copies of versions out of the trainer's channel: the newest, copied once
    however many relays it goes to, and older ones while a send still reads them.

    One thread follows the channel's doorbell (shared_memory.py) and keeps `published` at its
    newest version; each relay's thread waits in `acquire_newer` for one newer than it sent.
    """

    def __init__(self, channel: SharedMemoryChannel):
        self.channel = channel
        self.newest: StagedVersion | None = None
        self.spare: list[torch.Tensor] = []  # buffers no send uses, for the next copies
        self.published = 0  # the channel's newest version, as last heard
        self._changed = Condition()  # guards all of the above
        self._following = False

    def acquire_newer(self, than: int, timeout_s: float) -> StagedVersion | None:
        """The newest published version once it is newer than `than`, copied out if it is newer
        than the last copy; None if none comes within `timeout_s`. `release` it."""
        self._follow_doorbell()
        with self._changed:
            if not self._changed.wait_for(lambda: self.published > than, timeout_s):
                return None
            newest = self.newest
            if newest is None or self.published > newest.version:
                newest = self._stage(self.published)
            newest.users += 1
            return newest

    def release(self, staged: StagedVersion) -> None:
        with self._changed:
            staged.users -= 1
            if staged.users == 0 and staged is not self.newest:
                self.spare.append(staged.buffer)

    def _follow_doorbell(self) -> None:
        with self._changed:
            if self._following:
                return
            self._following = True
        doorbell = self.channel.doorbell()  # open before reading LATEST: no publish goes unheard
        Thread(target=self._follow, args=(doorbell,), name="doorbell", daemon=True).start()

    def _follow(self, doorbell: int) -> None:
        while True:
            latest = self.channel.latest() or 0
            with self._changed:
                if latest > self.published:
                    self.published = latest
                    self._changed.notify_all()
            os.read(doorbell, 4096)  # blocks until the next publish (or returns the rings since)

    def _stage(self, latest: int) -> StagedVersion:
        """Copy the slot of the channel's version `latest` out: the newest copy from now on."""
        with self.channel.reading_slot(latest) as (found, header, data):
            buffer = self._buffer(data.numel())
            buffer.copy_(data)
        old, self.newest = self.newest, StagedVersion(found, header, buffer)
        if old is not None and old.users == 0:
            self.spare.append(old.buffer)
        return self.newest

    def _buffer(self, size: int) -> torch.Tensor:
        while self.spare:
            buffer = self.spare.pop()
            if buffer.numel() == size:
                return buffer
        return torch.empty(size, dtype=torch.uint8)


def send_version(pair: Pair, staged: StagedVersion) -> int:
    """Send a staged version over `pair` and wait until the relay has it in its channel;
    returns the bytes sent."""
    header = torch.frombuffer(bytearray(staged.header), dtype=torch.uint8)
    frame = torch.tensor([staged.version, header.numel(), staged.buffer.numel()], dtype=torch.int64)
    for piece in (frame, header, *_chunks(staged.buffer)):
        pair.send([piece], RELAY, 0).wait()
    written = torch.empty(1, dtype=torch.int64)
    pair.recv([written], RELAY, 0).wait()
    if written.item() != staged.version:
        raise RuntimeError(f"the relay wrote version {written.item()}, not {staged.version}")
    return frame.numel() * 8 + header.numel() + staged.buffer.numel()


class ReceivedVersion:
    """The relay's buffer: a version received whole before it reaches the host's channel."""

    def __init__(self):
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def receive(self, pair: Pair) -> tuple[int, bytes]:
        """The next version over `pair` into the buffer; returns its version and header."""
        frame = torch.empty(3, dtype=torch.int64)
        pair.recv([frame], SENDER, 0).wait()
        version, header_length, size = frame.tolist()
        header = torch.empty(header_length, dtype=torch.uint8)
        pair.recv([header], SENDER, 0).wait()
        if self.buffer.numel() != size:
            self.buffer = torch.empty(size, dtype=torch.uint8)
        for piece in _chunks(self.buffer):
            pair.recv([piece], SENDER, 0).wait()
        return version, header.numpy().tobytes()


def relay_version(pair: Pair, received: ReceivedVersion, channel: SharedMemoryChannel, writing: Lock) -> int:
    """The next version over `pair` into `channel` once whole, then its number back to the sender;
    returns it. `writing` serialises the writes of a relay's pairs (an old pair's thread may still
    be receiving as a new one starts), and a version never goes over a newer one."""
    version, header = received.receive(pair)
    with writing:
        if version > (channel.latest() or 0):
            channel.write_slot(version, header, received.buffer)
    pair.send([torch.tensor([version], dtype=torch.int64)], SENDER, 0).wait()
    return version


def _chunks(buffer: torch.Tensor) -> list[torch.Tensor]:
    return [buffer[start : start + CHUNK_BYTES] for start in range(0, buffer.numel(), CHUNK_BYTES)]
