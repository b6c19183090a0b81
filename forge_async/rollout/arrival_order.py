"""Admitted calls reach the replay buffer in the order admission let them out.

Admission control (admission.py) counts a call's samples as queued behind every call admitted
before it: the trainer takes first-in first-out, so a call's place in the queue is its place
in admission order. Calls that run at once (`generator.calls_at_once=0`, several generators,
multi-turn groups) finish in any order, though: a call admitted after a version moved can
finish first, take an earlier batch's place and push the earlier call a version later, past
`max_policy_age` (dropped stale). So each admitted call holds a ticket and adds its episodes
only once every earlier ticket is retired (its episodes added, or the call lost): the order the
trainer sees is the order admission counted, and overlapping calls cost no stale drops.
"""

import asyncio


class ArrivalOrder:
    def __init__(self, enabled: bool = True):
        """`enabled`: false leaves calls to arrive as they finish (admission control off: there is
        no order to keep)."""
        self.enabled = enabled
        self._issued = 0
        self._retired: set[int] = set()
        self._next = 0  # the oldest ticket not retired
        self._changed = asyncio.Condition()

    def issue(self) -> int:
        """The next call's ticket; issued in admission order, under admission's lock."""
        ticket, self._issued = self._issued, self._issued + 1
        return ticket

    async def turn(self, ticket: int) -> None:
        """Wait until every ticket before `ticket` is retired."""
        if not self.enabled:
            return
        async with self._changed:
            await self._changed.wait_for(lambda: self._next >= ticket)

    async def retire(self, ticket: int) -> None:
        """`ticket`'s call added its episodes, or will never: later calls may go."""
        async with self._changed:
            self._retired.add(ticket)
            while self._next in self._retired:
                self._retired.discard(self._next)
                self._next += 1
            self._changed.notify_all()
