"""A follower that lags the trainer: refreshed every M steps to the version K steps before.

A snapshot's generators (handles/generators/snapshot.py) and a teacher that is the policy
itself (scoring/self_teacher.py) follow the published versions this way (0 <= K <= M): when
version k * M - K is published they copy it aside (`take`: the trainer's shared-memory channel
keeps the newest two versions only), and when version k * M is published they load that copy
(`use`). So from version k * M on they hold version k * M - K, and their lag behind the trainer
runs from K to K + M. Weight delivery tells them each version published (`published`); the
copies and loads run in order on a task of their own, beside the training loop, which never
waits for them. A version copied after a newer one took its slot in the channel is that newer
one: the version held says which. A resumed run's followers take and load the restored version
(`resumed`): the versions before it are gone with the run that made them.
"""

import asyncio
from abc import ABC, abstractmethod

TAKE = "take"  # copy the version just published aside
USE = "use"  # load the version copied aside


def steps_at(version: int, lag: int, refresh_steps: int) -> list[str]:
    """What to do when `version` is published, in order: with K = 0, take it, then load it;
    with K > 0, load what was taken K steps ago before taking anew (K = M does both at once)."""
    steps = []
    if (version + lag) % refresh_steps == 0:
        steps.append(TAKE)
    if version % refresh_steps == 0:
        steps.insert(0 if lag else len(steps), USE)
    return steps


class LaggedFollower(ABC):
    """Takes and loads versions as `steps_at` says; `take` and `use` are the follower's own."""

    def __init__(self, lag: int, refresh_steps: int):
        self.lag = lag
        self.refresh_steps = refresh_steps
        self.version = 0  # the version it holds (0: the initial weights)
        self.newest = 0  # the trainer's newest version published
        self.refreshes = 0
        self._work: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._worker: asyncio.Task | None = None

    @abstractmethod
    async def take(self, version: int) -> None:
        """Copy the trainer's `version` aside."""

    @abstractmethod
    async def use(self, version: int) -> int:
        """Load what was copied aside (`version` was just published); returns the version held."""

    def published(self, version: int) -> None:
        """The trainer published `version`: queue what it asks of the follower."""
        self._queue(version, steps_at(version, self.lag, self.refresh_steps))

    def resumed(self, version: int) -> None:
        """A resumed run's trainer published its restored `version`: the follower takes and
        loads it, the nearest to its lagged version that is left."""
        self._queue(version, [TAKE, USE])

    def _queue(self, version: int, steps: list[str]) -> None:
        self.newest = version
        for step in steps:
            self._work.put_nowait((step, version))
        if steps and self._worker is None:
            self._worker = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            step, version = await self._work.get()
            if step == TAKE:
                await self.take(version)
            else:
                self.version = await self.use(version)
                self.refreshes += 1

    def check(self) -> None:
        """Raise the worker's failure (the follower's procs failed)."""
        task = self._worker
        if task is not None and task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error

    async def close(self) -> None:
        """Cancel what is left to do (the run is ending)."""
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
