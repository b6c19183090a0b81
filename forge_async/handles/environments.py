"""Environment procs (env.procs >= 1): an EnvironmentHost on each, hosting episodes' environments.

Their calls are the episodes' (envs/remote.py, which names a failed host); the handles
here spawn and stop them.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from monarch.actor import ProcMesh

from forge_async.envs.remote import RemoteEnvironments
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner
from forge_async.observability.spans import Span


class EnvironmentHost(RoleHandle):
    """Environment proc `index`, making environments with `new_environment`."""

    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, index: int, new_environment: Callable[[], object]):
        super().__init__(spawner, procs_file, roles.environment(index))
        self.index = index
        self.new_environment = new_environment

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        procs, host = self.spawner.environment_host(self.index, self.new_environment)
        await host.prepare.call_one()
        return procs, host


class EnvironmentHosts:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, count: int):
        self.spawner = spawner
        self.procs_file = procs_file
        self.count = count
        self._hosts: list[EnvironmentHost] = []

    async def start(self, new_environment: Callable[[], object]) -> RemoteEnvironments:
        """A host making environments with `new_environment` on each proc; returns the factory of
        their proxies (the episodes' environments), spread over the hosts in turn."""
        for index in range(self.count):
            host = EnvironmentHost(self.spawner, self.procs_file, index, new_environment)
            await host.start()
            self._hosts.append(host)
        return RemoteEnvironments([(host.actor, host.located()) for host in self._hosts])

    async def trace_spans(self) -> dict[str, Awaitable[list[Span]]]:
        """Each host's pending spans call, by track (the caller bounds the wait)."""
        return {f"environment {h.index}": h.actor.trace_spans.call_one() for h in self._hosts}

    async def stop(self) -> None:
        await asyncio.gather(*(host.stop() for host in self._hosts))
