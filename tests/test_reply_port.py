"""Calls answered on one long-lived port (forge_async/mesh/reply_port.py), on real Monarch procs."""

import asyncio
import os
import signal
import time

import pytest

from forge_async.mesh.supervision import is_proc_failure
from forge_async.mesh.procs import keep_controller_alive_on_faults, spawn_procs
from forge_async.mesh.reply_port import LIVENESS_S, ReplyPort
from tests.echo_actor import Echo

pytestmark = pytest.mark.procs


def test_answers_reach_their_callers_errors_raise_and_a_dead_proc_is_reported():
    keep_controller_alive_on_faults()

    async def scenario() -> None:
        procs = spawn_procs(None, 2, "echo", None)
        try:
            both = procs.spawn("echo", Echo)
            one = both.slice(procs=0)
            replies = ReplyPort()
            assert await one.echo.call_one(3, factor=2) == 6  # without a port: as any endpoint
            # Concurrent requests, answered out of order (the first waits longest), each to its caller.
            values = await asyncio.gather(
                *(replies.call_one(one.echo, i, delay_s=0.05 * (5 - i), factor=10, alive=one.where) for i in range(5))
            )
            assert values == [0, 10, 20, 30, 40]
            assert await replies.call(both.echo, 7, alive=both.where, ranks=2) == {0: 7, 1: 7}
            with pytest.raises(ValueError, match="no negative values: -1"):
                await replies.call_one(one.echo, -1, alive=one.where)
            # A proc that dies never answers: the caller learns it within about LIVENESS_S.
            pending = asyncio.ensure_future(replies.call_one(one.echo, 1, delay_s=60, alive=one.where))
            await asyncio.sleep(0.3)
            os.kill(await one.where.call_one(), signal.SIGKILL)
            killed_at = time.monotonic()
            with pytest.raises(Exception) as failure:
                await pending
            assert is_proc_failure(failure.value), failure.value
            assert time.monotonic() - killed_at < LIVENESS_S + 10
        finally:
            await procs.stop()

    asyncio.run(scenario())
