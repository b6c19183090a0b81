"""WeightDelivery's pins, against a pool whose hold answers when told (the real hold runs in
tests/test_evaluation.py): what admission control is told while a pin is being taken."""

import asyncio

from forge_async.weights.delivery import WeightDelivery
from forge_async.weights.route import WeightRoute


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
