"""What a proc failure means to a call, in one place.

Monarch reports a proc that dies (a SIGKILL, an OOM kill) as a SupervisionError on
every call to its actors. `supervised` turns that into each role's policy: the
handle's `on_failure` (handles/handle.py: `RoleHandle._failed`) either brings the
role back (a respawned generator or buffer: the call is made again) or raises the
error that ends the run, naming the proc.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
STOP_TIMEOUT_S = 10


def is_proc_failure(err: BaseException) -> bool:
    """Whether `err` is Monarch's report of a dead proc (a RuntimeError from its Rust bindings)."""
    return type(err).__name__ == "SupervisionError"


def failure_cause(err: BaseException) -> str:
    """The last line of a (possibly remote, multi-line) error: what actually went wrong."""
    text = str(err)
    return text.splitlines()[-1].strip() if text.strip() else type(err).__name__


async def supervised(call: Callable[[], Awaitable[T]], on_failure: Callable[[Exception], Awaitable[None]]) -> T:
    """`call()`'s result. If its proc dies, `on_failure(err)` runs: it raises (the role cannot
    go on) or returns once the role is back, and the call is made again."""
    while True:
        try:
            return await call()
        except Exception as err:
            if not is_proc_failure(err):
                raise
            await on_failure(err)


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable`'s result, or TimeoutError after `seconds`, abandoning it (a Monarch call to a
    dead node may not end when cancelled, so asyncio.wait_for could wait for it anyway)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        raise TimeoutError(f"no answer within {seconds:.0f}s")
    return task.result()


async def stop_quietly(procs) -> None:
    """Stop a proc mesh that may already be dead (or was never spawned: None); never hang on it."""
    if procs is None:
        return
    try:
        await within(procs.stop(), STOP_TIMEOUT_S)
    except Exception:
        pass
