"""WeightDelivery against fakes of the pool and the relays (the real ones run in
tests/test_evaluation.py and tests/test_multihost.py): what admission control is told while a
pin is being taken, and a relay lost with its node, then taken back."""

import asyncio

import pytest

from forge_async.weights.delivery import WeightDelivery
from forge_async.weights.outcomes import LoadOutcome, Loaded, ReceiverLost, WeightReceiver
from forge_async.weights.route import Receiver, WeightRoute

pytestmark = pytest.mark.unit


class SlowHold:
    """One generator reading the trainer's channel; its hold answers once `answer` is set."""

    count = 1
    on_replaced = None

    def __init__(self, holds: int):
        self.holds = holds  # the version the hold keeps
        self.answer = asyncio.Event()

    async def hold_weights(self, index: int, hold: bool) -> int:
        if hold:
            await self.answer.wait()
        return self.holds


def test_a_version_published_while_a_hold_is_on_its_way_is_not_counted_on():
    async def scenario() -> None:
        generators = SlowHold(holds=5)
        delivery = WeightDelivery(generators, WeightRoute([], [None], False, ("shm",)))
        delivery.publish(5)
        pin = delivery.pinned(0)
        taking = asyncio.ensure_future(pin.__aenter__())
        await asyncio.sleep(0.01)  # the hold is on its way
        delivery.publish(6)  # the trainer steps meanwhile: the held generator will not have it
        assert delivery.generator_version(0) == 5
        generators.answer.set()
        assert await taking == 5 and delivery.generator_version(0) == 5
        await pin.__aexit__(None, None, None)
        assert delivery.generator_version(0) == 6  # released: it swaps to the newest
        await delivery.close()

    asyncio.run(scenario())


class Relays:
    """Two nodes' weight relays; one in `gone` answers as a relay lost with its node."""

    def __init__(self):
        self.gone: set[int] = set()
        self.loads: list[tuple[int, int]] = []

    async def load_version(self, index: int, version: int) -> LoadOutcome:
        if index in self.gone:
            return ReceiverLost(f"the weight relay of node {index + 1} is lost with its node")
        self.loads.append((index, version))
        return Loaded(version)


class TwoGenerators:
    count = 2
    on_replaced = None

    def __init__(self):
        self.lost: dict[int, str] = {}

    def lose(self, index: int, why: str) -> None:
        self.lost[index] = why


def test_a_relay_lost_with_its_node_is_brought_the_newest_version_once_taken_back():
    async def scenario() -> None:
        relays, generators = Relays(), TwoGenerators()
        route = WeightRoute([Receiver(relays, 0), Receiver(relays, 1)], [0, 1], False, ("shm",))
        delivery = WeightDelivery(generators, route)
        relays.gone.add(1)
        delivery.publish(3)
        await asyncio.sleep(0.05)
        assert delivery.lost == {1} and list(generators.lost) == [1]  # its generator is lost with it
        delivery.publish(4)  # nothing more goes to the lost relay
        await asyncio.sleep(0.05)
        assert relays.loads == [(0, 3), (0, 4)]
        relays.gone.clear()  # the node came back: its relay is spawned again, holding nothing
        delivery.take_back(1)
        assert delivery.generator_version(1) == 0  # admission counts on no version until it loads one
        await asyncio.sleep(0.05)
        assert (1, 4) in relays.loads and delivery.generator_version(1) == 4
        [first, back] = delivery.receivers_report()
        assert back == WeightReceiver(version=4, versions_skipped=0, link_failures=0, lost=False, taken_back=1)
        assert first.taken_back == 0 and first.version == 4
        delivery.check()  # no receiver failed
        await delivery.close()

    asyncio.run(scenario())
