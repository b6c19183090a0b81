"""Frequent calls answered on one long-lived port per handle, not a new port per call.

Monarch's `call_one` and `call` open a reply port for every call, and the proc that
answers keeps native memory for every port it has answered, for good
(`benchmarks/components/reply_ports.py`: the growth per call; `benchmarks/pipeline/soak.py`:
over a long run). At tens of calls a second that grows by the hour in every role. The calls made every step (the
buffer's add and sample, a generator's generate, the trainer's step, and a relay's or
generator's load from torchstore) therefore go
out with `broadcast`, carrying the caller's one `ReplyPort` and a request id; the
callee's endpoint, wrapped in `answers_on_port`, sends `(request, rank, result,
error)` there. Called without a port (`call_one`, tests, composed meshes), the same
endpoint returns its result as usual.

A reply never comes from a proc that died, so a caller waiting longer than
`LIVENESS_S` asks the callee's procs a plain question (`alive`, e.g. `where`): a dead
proc answers with Monarch's SupervisionError, which the handles already turn into each role's
policy (mesh/supervision.py).
"""

import asyncio
import functools
import inspect
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from monarch.actor import Channel, current_rank

LIVENESS_S = 1.0  # how long a caller waits for an answer before asking whether the callee lives


def answers_on_port(method: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    """An endpoint body that also answers on a caller's port: with `reply=` and `request=`,
    its result (or its exception) goes there, tagged with the request and this proc's rank."""

    @functools.wraps(method)
    async def endpoint_body(self, *args, reply=None, request: int = 0, **kwargs):
        if reply is None:
            return await method(self, *args, **kwargs)
        rank = current_rank().rank
        try:
            result = await method(self, *args, **kwargs)
        except Exception as err:  # the caller raises it, as call_one would
            reply.send((request, rank, None, err))
        else:
            reply.send((request, rank, result, None))

    signature = inspect.signature(method)  # Monarch checks a call's arguments against it
    extra = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d) for n, d in (("reply", None), ("request", 0))
    ]
    params = list(signature.parameters.values())
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    rest = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    # inspect.signature reads a function's `__signature__`; typeshed declares no such attribute
    endpoint_body.__signature__ = signature.replace(parameters=[*rest, *extra, *var_kw])  # type: ignore[attr-defined]
    return endpoint_body


@dataclass
class _Request:
    future: asyncio.Future
    answers: int  # ranks that answer it
    results: dict[int, Any] = field(default_factory=dict)  # by rank: its result (None if it raised)
    # Raised once every rank has answered: a rank whose peer died fails its collective, and
    # the dead peer's SupervisionError (from `alive`) is the error that names it.
    errors: list[Exception] = field(default_factory=list)


class ReplyPort:
    """The caller's side: one port, many requests in flight, each answered by `answers` ranks."""

    def __init__(self) -> None:
        self.port, self._receiver = Channel.open()
        self._requests = itertools.count()
        self._waiting: dict[int, _Request] = {}
        self._reader: asyncio.Task | None = None

    async def call(self, endpoint, *args, alive, ranks: int = 1, **kwargs) -> dict[int, Any]:
        """`endpoint(*args, **kwargs)` broadcast to its actor mesh; {rank: result} once `ranks`
        ranks have answered. `alive`: an endpoint of the same mesh whose call raises
        Monarch's SupervisionError once a proc of it has died (`where`)."""
        request = next(self._requests)
        future = asyncio.get_running_loop().create_future()
        self._waiting[request] = _Request(future, ranks)
        self._start_reader()
        try:
            endpoint.broadcast(*args, reply=self.port, request=request, **kwargs)
            return await answered(future, alive)
        finally:
            del self._waiting[request]

    async def call_one(self, endpoint, *args, alive, **kwargs) -> Any:
        """`call` to a mesh of one actor: its result."""
        return (await self.call(endpoint, *args, alive=alive, **kwargs))[0]

    def _start_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            request, rank, result, error = await self._receiver.recv()
            waiting = self._waiting.get(request)
            if waiting is None or waiting.future.done():  # its caller gave up, or a rank failed it
                continue
            waiting.results[rank] = result
            if error is not None:
                waiting.errors.append(error)
            if len(waiting.results) < waiting.answers:
                continue
            if waiting.errors:
                waiting.future.set_exception(waiting.errors[0])
            else:
                waiting.future.set_result(waiting.results)


async def answered(future: asyncio.Future, alive) -> Any:
    """`future`'s result, awaited the way a call's answer is: a watch on the answering procs
    (`alive`, as in `ReplyPort.call`) starts only if it is slow to come."""
    loop = asyncio.get_running_loop()
    watches: list[asyncio.Task] = []
    timer = loop.call_later(LIVENESS_S, lambda: watches.append(loop.create_task(_watch(future, alive))))
    try:
        return await future
    finally:
        timer.cancel()
        for watch in watches:
            watch.cancel()


async def _watch(future: asyncio.Future, alive) -> None:
    """Until `future` is answered, ask `alive` every LIVENESS_S: a dead proc's error fails it."""
    while not future.done():
        try:
            await alive.call()
        except Exception as err:  # Monarch's SupervisionError: the proc died
            if not future.done():
                future.set_exception(err)
            return
        await asyncio.sleep(LIVENESS_S)
