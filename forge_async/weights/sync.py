"""Getting each published version to the generators, without stopping the trainer.

shm transport: generators watch the channel's LATEST pointer and swap by
themselves between engine steps; `publish` has nothing to send.
torchstore transport: one updater task per generator loads the newest
published version whenever the generator is free to take it (versions
published meanwhile are skipped), and a version is deleted from the store once
every generator has moved past it.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable

from forge_async.weights import store

_POLL_S = 0.002


class WeightSync:
    """`call_generator(i, fn)` runs `fn(generator i)` (through the run's supervision)."""

    def __init__(
        self,
        call_generator: Callable,
        count: int,
        transport: str,
        on_loaded: Callable[[], Awaitable] | None = None,
        version: int = 0,
    ):
        self.call_generator = call_generator
        self.on_loaded = on_loaded
        self.transport = transport
        self.loaded = [version] * count  # last version each generator is known to hold
        self.published = version
        self.last_load_ms = 0.0
        self._wake = [asyncio.Event() for _ in range(count)]
        self._tasks = (
            [asyncio.create_task(self._update(i)) for i in range(count)]
            if transport == "torchstore"
            else []
        )

    def publish(self, version: int) -> None:
        self.published = version
        for event in self._wake:
            event.set()

    def generator_version(self, index: int) -> int:
        """The oldest version generator `index` can be sampling with from now on."""
        return self.published if self.transport == "shm" else self.loaded[index]

    async def wait_until_loaded(self, version: int) -> None:
        """Until every generator holds `version` (sync mode: generators are idle here)."""
        while min(self.loaded) < version:
            if self.transport == "shm":
                self.loaded = [
                    await self.call_generator(i, lambda g: g.get_version.call_one())
                    for i in range(len(self.loaded))
                ]
            if min(self.loaded) < version:
                await asyncio.sleep(_POLL_S)

    async def generator_replaced(self, index: int, generator) -> None:
        """A respawned generator starts from the initial weights: bring it to the newest version."""
        if self.transport == "torchstore" and self.published > 0:
            await generator.load_version.call_one(self.published)
        self.loaded[index] = self.published

    async def _update(self, index: int) -> None:
        while True:
            await self._wake[index].wait()
            self._wake[index].clear()
            version = self.published
            if version <= self.loaded[index]:
                continue
            start = time.perf_counter()
            await self.call_generator(index, lambda g: g.load_version.call_one(version))
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
