"""Weight sync from the trainer's pushes to the generators, without stopping the trainer.

`publish(v)` records that version v is in the store and returns at once. One
updater task per generator loads the newest published version whenever the
generator is free to take it; versions published while a load was queued are
skipped (only the newest matters). Once every generator has moved past a
version, it is deleted from the store.
"""

import asyncio
import time

from forge_async.weights import store


class WeightSync:
    def __init__(self, generators: list):
        self.generators = generators
        self.loaded = [0] * len(generators)  # version each generator holds
        self.published = 0
        self.last_load_ms = 0.0
        self._wake = [asyncio.Event() for _ in generators]
        self._loaded_changed = asyncio.Condition()
        self._tasks = [asyncio.create_task(self._update(i)) for i in range(len(generators))]

    def publish(self, version: int) -> None:
        self.published = version
        for event in self._wake:
            event.set()

    async def wait_until_loaded(self, version: int) -> None:
        async with self._loaded_changed:
            await self._loaded_changed.wait_for(lambda: min(self.loaded) >= version)

    async def _update(self, index: int) -> None:
        generator = self.generators[index]
        while True:
            await self._wake[index].wait()
            self._wake[index].clear()
            version = self.published
            if version <= self.loaded[index]:
                continue
            start = time.perf_counter()
            await generator.load_version.call_one(version)
            self.last_load_ms = (time.perf_counter() - start) * 1e3
            self.loaded[index] = version
            await store.delete_versions_before(min(self.loaded))
            async with self._loaded_changed:
                self._loaded_changed.notify_all()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
