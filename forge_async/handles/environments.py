"""Environment procs (env.procs >= 1): an EnvironmentHost on each, hosting episodes' environments."""

import asyncio
from collections.abc import Callable

from forge_async.envs.remote import RemoteEnvironments
from forge_async.handles.procs_file import ProcsFile, located
from forge_async.mesh.supervision import stop_quietly
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner


class EnvironmentHosts:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, count: int):
        self.spawner = spawner
        self.procs_file = procs_file
        self.count = count
        self._procs: list = []
        self._hosts: list = []

    async def start(self, new_environment: Callable[[], object]) -> RemoteEnvironments:
        """A host making environments with `new_environment` on each proc; returns the factory of
        their proxies (the episodes' environments), spread over the hosts in turn."""
        located_hosts = []
        for index in range(self.count):
            procs, host = self.spawner.environment_host(index, new_environment)
            where = await host.where.call_one()
            await host.prepare.call_one()
            self.procs_file.record(roles.environment(index), where)
            self._procs.append(procs)
            self._hosts.append(host)
            located_hosts.append((host, located(where)))
        return RemoteEnvironments(located_hosts)

    async def trace_spans(self) -> dict[str, object]:
        """Each host's pending spans call, by track (the caller bounds the wait)."""
        return {f"environment {i}": host.trace_spans.call_one() for i, host in enumerate(self._hosts)}

    async def stop(self) -> None:
        await asyncio.gather(
            *(stop_quietly(p) for i, p in enumerate(self._procs) if self.procs_file.reachable(roles.environment(i)))
        )
