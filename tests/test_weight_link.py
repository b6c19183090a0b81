"""The gloo link between the weight sender and a relay (weights/link.py), both sides in one
process on two threads over loopback: versions arrive whole, skip to the newest, a
publish wakes the sender, and a link that stalls mid-version leaves the relay's channel on
the version it had."""

import threading

import pytest
import torch

from forge_async.cluster.hosts import free_port
from forge_async.weights import link
from forge_async.weights.link import RELAY, SENDER, ReceivedVersion, Rendezvous, StagedVersions, relay_version
from forge_async.weights.shared_memory import SharedMemoryChannel

pytestmark = pytest.mark.unit

LOOPBACK = "127.0.0.1"


def state_dict(version: int) -> dict[str, torch.Tensor]:
    """Tensors whose values say which version they belong to; one spans several chunks."""
    big = link.CHUNK_BYTES // 4 * 2 + 123  # fp32: two chunks and a bit
    return {"embed.weight": torch.full((big,), float(version)), "norm.weight": torch.arange(7.0) + version}


def assert_holds(channel: SharedMemoryChannel, version: int) -> None:
    assert channel.latest() == version
    with channel.reading(version) as (found, tensors):
        assert found == version
        for name, expected in state_dict(version).items():
            assert torch.equal(tensors[name], expected), name


def in_thread(target, *args) -> tuple[threading.Thread, dict]:
    """Run `target(*args)` on a thread; the dict gets its "result" or "error"."""
    out: dict = {}

    def run():
        try:
            out["result"] = target(*args)
        except Exception as err:  # noqa: BLE001 - the test inspects it
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


class Pairs:
    """A rendezvous on loopback and, per attempt, both sides of relay 1's pair."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        port = free_port(LOOPBACK)
        self.server = link.serve_rendezvous(LOOPBACK, port, timeout_s)
        self.client = link.join_rendezvous(Rendezvous(LOOPBACK, port), timeout_s)

    def open(self, attempt: int):
        thread, relay = in_thread(link.open_pair, self.client, 1, attempt, RELAY, LOOPBACK, self.timeout_s)
        sender = link.open_pair(self.server, 1, attempt, SENDER, LOOPBACK, self.timeout_s)
        thread.join()
        return sender, relay["result"]


@pytest.fixture
def channels(tmp_path):
    return SharedMemoryChannel(tmp_path / "trainer"), SharedMemoryChannel(tmp_path / "relay")


WAIT_S = 30.0  # for a publish's doorbell: reached only if it never rings


def transfer(sender_pair, relay_pair, staged: StagedVersions, relay: SharedMemoryChannel, than: int = 0) -> int:
    """One version newer than `than` over the pair into the relay's channel (the send returns once
    it is written); returns it."""
    thread, out = in_thread(relay_version, relay_pair, ReceivedVersion(), relay, threading.Lock())
    version = staged.acquire_newer(than, WAIT_S)
    try:
        link.send_version(sender_pair, version)
        assert relay.latest() >= version.version  # written (or a newer one) before the sender hears back
    finally:
        staged.release(version)
    thread.join()
    return out["result"]


def test_versions_arrive_whole_and_the_newest_is_sent(channels):
    trainer, relay = channels
    sender_pair, relay_pair = Pairs(timeout_s=10).open(attempt=1)
    staged = StagedVersions(trainer)
    trainer.write(1, state_dict(1))
    assert transfer(sender_pair, relay_pair, staged, relay) == 1
    assert_holds(relay, 1)
    for version in (2, 3, 4):  # published while nothing was sent: only the newest goes
        trainer.write(version, state_dict(version))
    assert transfer(sender_pair, relay_pair, staged, relay, than=1) == 4
    assert_holds(relay, 4)


def test_a_version_still_being_sent_is_kept_while_a_newer_one_is_staged(channels):
    trainer, _ = channels
    staged = StagedVersions(trainer)
    trainer.write(1, state_dict(1))
    first = staged.acquire_newer(0, WAIT_S)
    trainer.write(2, state_dict(2))
    second = staged.acquire_newer(1, WAIT_S)
    assert (first.version, second.version) == (1, 2) and first.buffer is not second.buffer
    assert staged.acquire_newer(0, WAIT_S) is second  # copied once, however many relays it goes to
    staged.release(first)
    trainer.write(3, state_dict(3))
    staged.release(second), staged.release(second)
    third = staged.acquire_newer(2, WAIT_S)
    assert third.version == 3 and third.buffer is first.buffer  # a buffer no send uses is reused


def test_a_sender_waiting_for_a_version_wakes_at_its_publish(channels):
    trainer, _ = channels
    staged = StagedVersions(trainer)
    assert staged.acquire_newer(0, 0.05) is None  # nothing published yet
    trainer.write(1, state_dict(1))
    staged.release(staged.acquire_newer(0, WAIT_S))
    assert staged.acquire_newer(1, 0.05) is None  # nothing newer than 1
    thread, out = in_thread(staged.acquire_newer, 1, WAIT_S)  # waits on the channel's doorbell
    trainer.write(2, state_dict(2))
    thread.join()
    assert out["result"].version == 2


def test_a_link_that_stalls_mid_version_leaves_the_old_version_and_a_new_pair_works(channels):
    trainer, relay = channels
    pairs = Pairs(timeout_s=1)
    sender_pair, relay_pair = pairs.open(attempt=1)
    staged = StagedVersions(trainer)
    trainer.write(1, state_dict(1))
    assert transfer(sender_pair, relay_pair, staged, relay) == 1

    trainer.write(2, state_dict(2))
    version = staged.acquire_newer(1, WAIT_S)
    thread, out = in_thread(relay_version, relay_pair, ReceivedVersion(), relay, threading.Lock())
    header = torch.frombuffer(bytearray(version.header), dtype=torch.uint8)
    frame = torch.tensor([version.version, header.numel(), version.buffer.numel()], dtype=torch.int64)
    for piece in (frame, header, version.buffer[: link.CHUNK_BYTES]):  # then the link goes quiet
        sender_pair.send([piece], RELAY, 0).wait()
    thread.join(timeout=30)
    assert isinstance(out.get("error"), RuntimeError), out
    assert_holds(relay, 1)  # nothing of version 2 reached the channel
    staged.release(version)

    sender_pair, relay_pair = pairs.open(attempt=2)
    assert transfer(sender_pair, relay_pair, staged, relay, than=1) == 2
    assert_holds(relay, 2)


def test_a_version_older_than_the_channels_is_acknowledged_but_not_written(channels):
    """An old pair's thread may finish a version after a new pair wrote a newer one: it must not go back."""
    trainer, relay = channels
    sender_pair, relay_pair = Pairs(timeout_s=10).open(attempt=1)
    trainer.write(1, state_dict(1))
    relay.write(2, state_dict(2))
    assert transfer(sender_pair, relay_pair, StagedVersions(trainer), relay) == 1  # the sender hears 1
    assert_holds(relay, 2)
