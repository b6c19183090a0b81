"""The weight sender's stream (actors/weight_sender.py) on real procs of this host, the relay's
channel in a directory of its own: every version the trainer's channel publishes reaches the
relay's channel and is reported on the caller's port, with no call per version, and a new
pair's attempt takes over from the old one."""

import asyncio

import pytest
import torch
from monarch.actor import Channel, this_host

from forge_async.actors.weight_relay import WeightRelay
from forge_async.actors.weight_sender import WeightSender
from forge_async.weights.shared_memory import SharedMemoryChannel

pytestmark = pytest.mark.procs

TIMEOUT_S = 30.0
RELAY_NODE = 1


def state_dict(version: int) -> dict[str, torch.Tensor]:
    return {"embed.weight": torch.full((1000,), float(version)), "norm.weight": torch.arange(7.0) + version}


def holds(channel: SharedMemoryChannel, version: int) -> bool:
    with channel.reading(version) as (found, tensors):
        return found == version and all(torch.equal(tensors[n], t) for n, t in state_dict(version).items())


async def open_pair(sender, relay, attempt: int, reports) -> None:
    opened = await asyncio.gather(
        sender.open_pair.call_one(RELAY_NODE, attempt, reports), relay.open_pair.call_one(attempt)
    )
    assert opened == [None, None], opened


async def publish_and_hear(trainer: SharedMemoryChannel, version: int, arrivals) -> tuple:
    trainer.write(version, state_dict(version))
    return await asyncio.wait_for(arrivals.recv(), TIMEOUT_S)


def test_each_published_version_reaches_the_relay_and_a_new_pair_takes_over(tmp_path):
    async def run():
        trainer, relayed = SharedMemoryChannel(tmp_path / "trainer"), SharedMemoryChannel(tmp_path / "relay")
        procs = this_host().spawn_procs(per_host={"procs": 2})
        sender = procs.slice(procs=0).spawn("sender", WeightSender, str(trainer.directory), TIMEOUT_S)
        relay = procs.slice(procs=1).spawn("relay", WeightRelay, str(relayed.directory), RELAY_NODE)
        try:
            await relay.join.call_one(await sender.rendezvous.call_one(), TIMEOUT_S)
            reports, arrivals = Channel.open()
            await open_pair(sender, relay, 1, reports)
            for version in (1, 2, 3):
                node, attempt, report = await publish_and_hear(trainer, version, arrivals)
                assert (node, attempt, report.version) == (RELAY_NODE, 1, version), report
                assert report.bytes > 0 and holds(relayed, version)

            await open_pair(sender, relay, 2, reports)  # as after a failed link
            node, attempt, report = await asyncio.wait_for(arrivals.recv(), TIMEOUT_S)
            assert (attempt, report.version) == (2, 3), report  # a new pair sends the newest at once
            for version in (4, 5):  # the old pair sends and reports nothing more
                node, attempt, report = await publish_and_hear(trainer, version, arrivals)
                assert (attempt, report.version) == (2, version), report
                assert holds(relayed, version)
        finally:
            await procs.stop()

    asyncio.run(run())
