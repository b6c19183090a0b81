"""Getting each published version to the generators, without stopping the trainer.

The loop calls `publish(version)` after every step; the route (route.py) says who
must be told. Generators that read the trainer's own shared-memory channel pick
new versions up by themselves between engine steps: nothing is sent to them.
One updater task per receiver (a node's weight relay, or a generator under the
torchstore transport) loads the newest published version whenever the receiver
is free to take it (versions published meanwhile are skipped), and a version is
deleted from the store once every receiver has moved past it.

`pinned(i)` is the one way to keep a generator on one version across calls
(evaluations); `generator_version(i)` tells admission control the oldest version
generator i can be sampling with from now on, pins included.

Others follow the published versions at a pace of their own (`followers`): a `snapshot`
seat's generators, not among `generators` (handles/generators/snapshot.py), and a teacher
that is the policy itself (scoring/self_teacher.py). Each is told every version published,
and takes one every so many steps.
"""

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from forge_async.weights.outcomes import LinkFailed, ReceiverLost, WeightReceiver
from forge_async.weights.route import WeightRoute

_POLL_S = 0.002
_RETRY_S = 1.0


class Generators(Protocol):
    """What delivery asks of the generators (handles/generators/pool.py: GeneratorPool)."""

    count: int
    on_replaced: Callable[[int, object], Awaitable[None]] | None

    async def version(self, index: int) -> int: ...

    async def live_versions(self) -> list[int]: ...

    def lose(self, index: int, why: str) -> None: ...

    async def hold_weights(self, index: int, hold: bool) -> int: ...

    async def until_all_hold(self, version: int, within_s: float | None = None) -> bool: ...


class Follower(Protocol):
    """Told of each version published; takes one now and then, beside the loop."""

    def published(self, version: int) -> None: ...

    def resumed(self, version: int) -> None: ...

    def check(self) -> None: ...

    async def close(self) -> None: ...


class WeightDelivery:
    def __init__(
        self,
        generators: Generators,
        route: WeightRoute,
        on_loaded: Callable[[], Awaitable] | None = None,
        followers: Sequence[Follower] | None = None,
    ):
        """`on_loaded()`: after a receiver loads a version, or a pin ends (admission control
        learns that generators moved on); `followers`: told of every version published."""
        self.generators = generators
        self.followers = followers or []
        self.route = route
        self.on_loaded = on_loaded
        self.loaded = [0] * len(route.receivers)  # last version each receiver is known to hold
        self.skipped = [0] * len(route.receivers)  # versions a receiver never loaded (a newer one came first)
        self.link_failures = [0] * len(route.receivers)
        self.lost: set[int] = set()  # receivers lost with their node (and its generators)
        self.taken_back = [0] * len(route.receivers)  # times a receiver's node came back
        self.published = 0
        self.last_load_ms = 0.0
        self._wake = [asyncio.Event() for _ in route.receivers]
        self._loading = [asyncio.Lock() for _ in route.receivers]  # held while a receiver loads, or is pinned
        self._pinned: dict[int, int] = {}  # generator -> version it holds (channel readers)
        self._tasks = [asyncio.create_task(self._update(i)) for i in range(len(route.receivers))]
        generators.on_replaced = self.generator_replaced

    @property
    def push_targets(self) -> tuple[str, ...]:
        return self.route.push_targets

    def check(self) -> None:
        """Raise a receiver's failure: its generators would never catch up."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                raise error
        for follower in self.followers:
            follower.check()

    def publish(self, version: int, resumed: bool = False) -> None:
        """The trainer has published `version` to the push targets: bring it to every generator.
        `resumed`: the version a resumed run restored, which followers take at once."""
        self.check()
        self.published = version
        for event in self._wake:
            event.set()
        for follower in self.followers:
            follower.resumed(version) if resumed else follower.published(version)

    def take_back(self, index: int) -> None:
        """Receiver `index`, lost with its node, is back (spawned again, holding no version yet):
        bring it the newest version from now on."""
        self.lost.discard(index)
        self.loaded[index] = 0
        self.taken_back[index] += 1
        self._tasks[index] = asyncio.create_task(self._update(index))
        self._wake[index].set()

    def receivers_report(self) -> list[WeightReceiver]:
        """Per receiver: the version it holds, the versions it skipped, its failed links, whether
        it is lost, and how often its node came back."""
        return [
            WeightReceiver(version=v, versions_skipped=s, link_failures=f, lost=i in self.lost, taken_back=b)
            for i, (v, s, f, b) in enumerate(zip(self.loaded, self.skipped, self.link_failures, self.taken_back))
        ]

    def generator_version(self, index: int) -> int:
        """The oldest version generator `index` can be sampling with from now on."""
        if index in self._pinned:
            return self._pinned[index]
        receiver = self.route.receiver_of[index]
        return self.published if receiver is None else self.loaded[receiver]

    async def wait_until_loaded(self, version: int) -> None:
        """Until every generator holds `version` (sync mode: generators are idle here).

        Receivers first (they count a version as loaded only after tidying the store),
        then the generators themselves (those that read a shared-memory channel swap by
        themselves, between engine steps).
        """
        while min(self._held_by_receivers(), default=version) < version:
            await asyncio.sleep(_POLL_S)
        await self.generators.until_all_hold(version)

    def _held_by_receivers(self) -> list[int]:
        return [v for i, v in enumerate(self.loaded) if i not in self.lost]

    @asynccontextmanager
    async def pinned(self, index: int) -> AsyncIterator[int]:
        """Generator `index` keeps the weights it holds until the block ends; yields their version.

        A generator told what to load (torchstore) is told nothing meanwhile; one that reads a
        shared-memory channel is asked to hold its weights (it swaps to the newest version after).
        Either way `generator_version` says the held version, so admission control sends that
        generator no work it could not train on in time."""
        if self.route.receivers_are_generators:
            async with self._loading[index]:
                yield await self.generators.version(index)
            return
        # Until the hold answers, admission counts on the version the generator is known to have
        # now: the hold keeps at least that one (it takes the newest first), never a later publish.
        self._pinned[index] = self.generator_version(index)
        try:
            self._pinned[index] = await self.generators.hold_weights(index, True)
        except BaseException:
            del self._pinned[index]
            raise
        try:
            yield self._pinned[index]
        finally:
            del self._pinned[index]
            await self.generators.hold_weights(index, False)
            if self.on_loaded is not None:
                await self.on_loaded()  # admission: that generator is at the newest version again

    async def generator_replaced(self, index: int, generator) -> None:
        """A respawned generator starts from the initial weights: bring it to the newest version.

        One that reads a shared-memory channel swaps to the newest version by itself.
        """
        if self.route.receivers_are_generators and self.published > 0:
            await generator.load_version.call_one(self.published)

    async def _update(self, index: int) -> None:
        receiver = self.route.receivers[index]
        delete_versions_before: Callable[[int], Awaitable[object]] | None = None
        if self.route.through_store:  # heavy to import: only where torchstore is used
            from forge_async.weights.store import delete_versions_before
        while True:
            await self._wake[index].wait()
            self._wake[index].clear()
            version = self.published
            if version <= self.loaded[index]:
                continue
            async with self._loading[index]:
                version = self.published  # the newest, after waiting out a pin
                start = time.perf_counter()
                result = await receiver.load(version)
                self.last_load_ms = (time.perf_counter() - start) * 1e3
            if isinstance(result, ReceiverLost):  # nothing more to bring it, nor to its generators
                self._lost(index, result.why)
                return
            if isinstance(result, LinkFailed):
                self._link_failed(index, result.why)
                continue
            version = result.version  # a sender sends the newest it has
            if delete_versions_before is not None:  # through the store
                holding = [version if i == index else v for i, v in enumerate(self.loaded) if i not in self.lost]
                await delete_versions_before(min(holding))  # before `loaded`: waiters see a tidy store
            if self.loaded[index]:  # versions before the first it loads were never its to skip
                self.skipped[index] += max(0, version - self.loaded[index] - 1)
            self.loaded[index] = version
            if self.on_loaded is not None:
                await self.on_loaded()

    def _lost(self, index: int, why: str) -> None:
        """Receiver `index` is lost with its node (a generator under the torchstore transport is
        lost already, said by the pool); a relay's generators are lost with it."""
        self.lost.add(index)
        if self.route.receivers_are_generators:
            return
        print(f"{why}: weights go to the other nodes", flush=True)
        for generator, receiver in enumerate(self.route.receiver_of):
            if receiver == index:
                self.generators.lose(generator, "is lost with its node's weight relay")

    def _link_failed(self, index: int, error: str) -> None:
        """A receiver's link failed mid-version: its host keeps the version it had; say so, and
        try again soon (a run waiting on that version must not wait for the next publish)."""
        self.link_failures[index] += 1
        print(
            f"warning: {error}; that host keeps version {self.loaded[index]}, and is sent the newest again",
            file=sys.stderr,
            flush=True,
        )
        asyncio.get_running_loop().call_later(_RETRY_S, self._wake[index].set)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for follower in self.followers:
            await follower.close()
