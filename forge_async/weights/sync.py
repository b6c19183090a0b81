"""Getting each published version to the generators, without stopping the trainer.

Generators that read a shared-memory channel the trainer writes (same node, shm
transport) pick new versions up by themselves between engine steps: `publish`
has nothing to send them. Everything else is a *receiver* that must be told to
load a version from torchstore: each generator (torchstore transport), or the
weight relay of another node, which writes it into that node's channel for the
generators there. One updater task per receiver loads the newest published
version whenever the receiver is free to take it (versions published meanwhile
are skipped), and a version is deleted from the store once every receiver has
moved past it.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

_POLL_S = 0.002

Load = Callable[[int], Awaitable[dict]]  # load(version): a receiver takes that version


class WeightSync:
    def __init__(
        self,
        call_generator: Callable,
        count: int,
        receivers: list[Load],
        receiver_of: list[int | None],
        receivers_are_generators: bool = False,
        on_loaded: Callable[[], Awaitable] | None = None,
    ):
        """`call_generator(i, fn)` runs `fn(generator i)`; `receiver_of[i]`: the receiver that
        brings generator i its weights, or None if it reads the trainer's own channel.
        `receivers_are_generators`: receiver i is generator i (torchstore transport)."""
        self.call_generator = call_generator
        self.receivers_are_generators = receivers_are_generators
        self.count = count
        self.receivers = receivers
        self.receiver_of = receiver_of
        self.on_loaded = on_loaded
        self.loaded = [0] * len(receivers)  # last version each receiver is known to hold
        self.published = 0
        self.last_load_ms = 0.0
        self._wake = [asyncio.Event() for _ in receivers]
        self._loading = [asyncio.Lock() for _ in receivers]  # held while a receiver loads, or is pinned
        self._pinned: dict[int, int] = {}  # generator -> version it holds for an evaluation (channel readers)
        self._tasks = [asyncio.create_task(self._update(i)) for i in range(len(receivers))]

    def check(self) -> None:
        """Raise a receiver's failure: its generators would never catch up."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()

    def publish(self, version: int) -> None:
        self.check()
        self.published = version
        for event in self._wake:
            event.set()

    def generator_version(self, index: int) -> int:
        """The oldest version generator `index` can be sampling with from now on."""
        if index in self._pinned:
            return self._pinned[index]
        receiver = self.receiver_of[index]
        return self.published if receiver is None else self.loaded[receiver]

    async def wait_until_loaded(self, version: int) -> None:
        """Until every generator holds `version` (sync mode: generators are idle here).

        Receivers first (they count a version as loaded only after tidying the store),
        then the generators themselves (those that read a shared-memory channel swap by
        themselves, between engine steps).
        """
        while min(self.loaded, default=version) < version:
            await asyncio.sleep(_POLL_S)
        while True:
            held = [
                await self.call_generator(i, lambda g: g.get_version.call_one()) for i in range(self.count)
            ]
            if min(held) >= version:
                return
            await asyncio.sleep(_POLL_S)

    @asynccontextmanager
    async def pinned(self, index: int) -> AsyncIterator[int]:
        """Generator `index` keeps the weights it holds until the block ends; yields their version.

        A generator told what to load (torchstore) is told nothing meanwhile; one that reads a
        shared-memory channel is asked to hold its weights (it swaps to the newest version after).
        Either way `generator_version` says the held version, so admission control sends that
        generator no work it could not train on in time."""
        if self.receivers_are_generators:
            async with self._loading[index]:
                yield await self.call_generator(index, lambda g: g.get_version.call_one())
            return
        self._pinned[index] = await self.call_generator(index, lambda g: g.hold_weights.call_one(True))
        try:
            yield self._pinned[index]
        finally:
            del self._pinned[index]
            await self.call_generator(index, lambda g: g.hold_weights.call_one(False))
            if self.on_loaded is not None:
                await self.on_loaded()  # admission: that generator is at the newest version again

    async def generator_replaced(self, index: int, generator) -> None:
        """A respawned generator starts from the initial weights: bring it to the newest version.

        One that reads a shared-memory channel swaps to the newest version by itself.
        """
        if self.receivers_are_generators and self.published > 0:
            await generator.load_version.call_one(self.published)

    async def _update(self, index: int) -> None:
        from forge_async.weights import store  # torchstore: ~1 s to import, only where it is used

        while True:
            await self._wake[index].wait()
            self._wake[index].clear()
            version = self.published
            if version <= self.loaded[index]:
                continue
            async with self._loading[index]:
                version = self.published  # the newest, after waiting out a pin
                start = time.perf_counter()
                await self.receivers[index](version)
                self.last_load_ms = (time.perf_counter() - start) * 1e3
            holding = [version if i == index else v for i, v in enumerate(self.loaded)]
            await store.delete_versions_before(min(holding))
            self.loaded[index] = version  # after the cleanup, so waiters see a tidy store
            if self.on_loaded is not None:
                await self.on_loaded()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
