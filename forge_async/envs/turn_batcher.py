"""Model turns of concurrent episodes, sent to the generators as one generate call.

An episode asks for its next model turn once its environment has stepped. A native
environment steps at once, so the episodes whose turns came back together ask again in
the same pass of the event loop. An agent program's next request takes a few passes
(an HTTP response, the agent's code, its next request), one episode after another;
sent as they come, its turns went out one or two a call (1.8 on average for
tool_lookup, against 6 natively), each call with its full fixed cost.

So the batcher waits until every episode it plays is waiting on the model (its turn
queued here or in a call under way), then sends what is queued; or, if an environment
takes longer than `max_wait_s` (env.turn_batch_wait_s), sends what is queued by then.
The generator runs its calls at once, so a call's turns join the engine's batch as soon as
they arrive; what a bigger call saves is the per-call work of both processes (a Monarch
message each way, the endpoint's bookkeeping), which on a CPU host is taken from the
engine's own cores.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import astuple
from typing import TYPE_CHECKING

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.envs.runner import EnvRunner
from forge_async.tasks.task import Prompt

if TYPE_CHECKING:
    from forge_async.envs.seats import SeatRunner

# A generator's call: (prompt token ids, sampling, completions per prompt) -> one group of
# completions per prompt (handles/generators/generator.py: GeneratorHandle.generate)
Generate = Callable[[list[list[int]], SamplingConfig, int], Awaitable[list[list[Completion]]]]


class TurnBatcher:
    def __init__(self, generate: Generate, max_wait_s: float):
        """`max_wait_s`: longest a queued turn waits for the other episodes' environments."""
        self.generate = generate
        self.max_wait_s = max_wait_s
        self._playing = 0  # episodes started and not ended
        self._in_calls = 0  # turns in generate calls under way
        self._queued: dict[tuple, tuple[SamplingConfig, list]] = {}  # per sampling config: (ids, future)s
        self._deadline: asyncio.TimerHandle | None = None
        self._check_scheduled = False
        self._sending: set[asyncio.Task] = set()  # held: the event loop keeps weak references only

    async def play(
        self, runner: "EnvRunner | SeatRunner", prompt: Prompt, sampling: SamplingConfig | None = None
    ) -> "Completion | list[Completion]":
        """One episode played by `runner`, its turns sent with the other episodes': its completion,
        or a SeatRunner's list of them (one per policy seat)."""
        self._playing += 1
        try:
            return await runner.play(prompt, self, sampling)
        finally:
            self._playing -= 1
            self._check_soon()

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        """The runner's generate: one model turn."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queued.setdefault(astuple(sampling), (sampling, []))[1].append((prompt_ids, future))
        if self._deadline is None:
            self._deadline = loop.call_later(self.max_wait_s, self._send_queued)
        self._check_soon()
        return await future

    def _check_soon(self) -> None:
        """Check in the next pass of the loop, once the episodes woken with this one (started
        together, or answered by the same call) have run up to their next turn."""
        if not self._check_scheduled:
            self._check_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_if_none_stepping)

    def _send_if_none_stepping(self) -> None:
        self._check_scheduled = False
        queued = sum(len(batch) for _, batch in self._queued.values())
        if queued and queued + self._in_calls >= self._playing:
            self._send_queued()

    def _send_queued(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        for sampling, batch in self._queued.values():
            self._in_calls += len(batch)
            task = asyncio.ensure_future(self._send(sampling, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self._queued = {}

    async def _send(self, sampling: SamplingConfig, batch: list) -> None:
        try:
            groups = await self.generate([ids for ids, _ in batch], sampling, 1)
        except Exception as err:
            for _, future in batch:
                if not future.done():  # a waiter cancelled meanwhile (its group was) is left alone
                    future.set_exception(err)
            return
        finally:
            self._in_calls -= len(batch)
        for (_, future), group in zip(batch, groups, strict=True):
            if not future.done():
                future.set_result(group[0])
