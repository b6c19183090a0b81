"""Admission control: generate only what can still be trained within max_policy_age.

The trainer takes samples first-in first-out, `batch_size` per step. A request
for n samples admitted now, while Q samples are already queued (in flight or
buffered), puts its last sample in batch (Q + n - 1) // batch_size counted from
the trainer's next batch. If the trainer will take that next batch at version
t and the generator samples with weights of at least version p, that sample's
policy age is at most

    (t - p) + (Q + n - 1) // batch_size

so a request is admitted only when this is <= max_policy_age, and otherwise
waits (counted as paused time) until the trainer has consumed enough or new
weights reached the generator. Stale drops stay in the buffer as the safety
net; with admission control on they should not happen. That holds because
admitted calls reach the buffer in admission order, however they finish
(arrival_order.py): each admitted call holds a ticket for its turn.
"""

import asyncio
import time
from typing import NamedTuple

from forge_async.rollout.arrival_order import ArrivalOrder
from forge_async.rollout.types import Choice, Router


class Admitted(NamedTuple):
    samples: int  # 0: none, the run is closing
    choice: Choice | None  # the generator the call goes to
    ticket: int | None  # its turn to reach the buffer (arrival_order.py)


class AdmissionControl:
    def __init__(self, batch_size: int, max_policy_age: int, enabled: bool = True):
        self.batch_size = batch_size
        self.max_policy_age = max_policy_age
        self.enabled = enabled
        self.queued = 0  # samples admitted and not yet taken by the trainer (or dropped)
        self.in_flight = 0  # of those, samples still being generated
        self.trainer_version = 0  # version the trainer holds
        self.training = False  # a step is running: the next batch is taken at version + 1
        self.paused_s = 0.0
        self.closed = False
        self.arrivals = ArrivalOrder(enabled)
        self._changed = asyncio.Condition()

    def restore(self, trainer_version: int, queued: int) -> None:
        """Start from a checkpoint: the trainer at `trainer_version`, `queued` samples buffered."""
        self.trainer_version = trainer_version
        self.queued = queued

    def fits(self, n: int, generator_version: int) -> bool:
        next_batch_version = self.trainer_version + int(self.training)
        lag = next_batch_version - generator_version
        return lag + (self.queued + n - 1) // self.batch_size <= self.max_policy_age

    def recent_enough(self, n: int, generator_version: int) -> bool:
        """Whether n samples from a generator at `generator_version` would fit with nothing else
        queued: its weights are not too old for any call (rollout/routing.py passes it over if not)."""
        next_batch_version = self.trainer_version + int(self.training)
        return next_batch_version - generator_version + (n - 1) // self.batch_size <= self.max_policy_age

    def _largest_fit(self, n: int, unit: int, generator_version: int) -> int:
        """The most samples, a multiple of `unit` up to n, that fit now (0: none)."""
        while n > 0 and not self.fits(n, generator_version):
            n -= unit
        return max(n, 0)

    async def admit(self, n: int, router: Router, unit: int | None = None) -> Admitted:
        """Wait until n samples fit, count them; returns n, the generator they go to and the
        call's ticket for the buffer (the caller retires it: `self.arrivals`).

        A call is judged by the version of the generator it will go to, and which one that is
        can change while it waits (another finishes its work, one receives new weights): so
        `router` chooses anew at every check, and the choice the call was admitted by is
        returned. With `unit` (a group's samples): wait until one unit fits, then admit as many
        units as fit, up to n. Needed when groups may be dropped on arrival (filter.*): a full
        request might never fit beside the few samples left queued. Admits nothing (0 samples,
        no ticket) once the run is closing.
        """
        unit = unit or n
        start = time.perf_counter()
        async with self._changed:
            while not self.closed:
                choice = router.choose()
                admitted = self._largest_fit(n, unit, choice.version) if self.enabled else n
                if admitted:
                    break
                await self._changed.wait()
            if self.closed:
                return Admitted(0, None, None)
            self.queued += admitted
            self.in_flight += admitted
            ticket = self.arrivals.issue()
        self.paused_s += time.perf_counter() - start
        return Admitted(admitted, choice, ticket)

    async def close(self) -> None:
        async with self._changed:
            self.closed = True
            self._changed.notify_all()

    async def generated(self, n: int) -> None:
        """n admitted samples reached the buffer."""
        async with self._changed:
            self.in_flight -= n
            self._changed.notify_all()

    async def lost(self, n: int) -> None:
        """n admitted samples will never arrive (their call died with its generator, or was cancelled)."""
        async with self._changed:
            self.in_flight -= n
            self.queued -= n
            self._changed.notify_all()

    async def dropped(self, n: int) -> None:
        """n queued samples will never be trained (the buffer dropped or lost them)."""
        async with self._changed:
            self.queued -= n
            self._changed.notify_all()

    async def step_started(self, taken: int) -> None:
        async with self._changed:
            self.queued -= taken
            self.training = True
            self._changed.notify_all()

    async def step_finished(self, version: int) -> None:
        async with self._changed:
            self.trainer_version = version
            self.training = False
            self._changed.notify_all()

    async def weights_moved(self) -> None:
        """A generator picked up new weights: waiting requests may fit now."""
        async with self._changed:
            self._changed.notify_all()
