"""A role's handle: the controller's side of one role's proc mesh and its actor.

Every handle has the same life: `start` spawns its role (`_spawn`, handles/spawner.py)
and records where it runs in procs.json; each call to its actor goes through `_call`,
which applies the role's one failure policy (`_failed`, mesh/supervision.py) when the
actor's proc dies: bring the role back (the call is then made again) or raise the error
that ends the run, naming the proc; `stop` stops its procs while their node answers.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from monarch.actor import ProcMesh

from forge_async.handles.procs_file import ProcsFile, Where, located
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh.roles import Role
from forge_async.mesh.supervision import T, stop_quietly, supervised
from forge_async.observability.span_names import ROLE_START
from forge_async.observability.spans import TRACER


class RoleHandle:
    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, role: Role):
        self.spawner = spawner
        self.procs_file = procs_file
        self.role = role
        self.procs: ProcMesh | None = None  # until start()
        self._actor: Any = None  # the role's actor mesh (Monarch's endpoints are untyped), from start()
        self._respawning = asyncio.Lock()

    @property
    def actor(self) -> Any:
        """The role's actor mesh, as its last `start` spawned it."""
        if self._actor is None:
            raise RuntimeError(f"the {self.role} actor is asked for before its start")
        return self._actor

    @property
    def started(self) -> bool:
        """Whether `start` has spawned its actor (a respawn keeps the last one until it succeeds)."""
        return self._actor is not None

    async def start(self) -> None:
        with TRACER.span(ROLE_START, lane=str(self.role)):
            self.procs, self._actor = await self._spawn()
        self.procs_file.record(self.role, await self._where())

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        """(procs, actor) of the role, ready for calls."""
        raise NotImplementedError

    async def _where(self) -> Where | list[Where]:
        """Where the actor's procs run, as procs.json records it."""
        return await self.actor.where.call_one()

    def located(self) -> str:
        """The role's proc, as error messages name it."""
        return located(self.procs_file.one(self.role))

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` (which reaches `self.actor` anew each time it is made); if the actor's proc dies,
        the role's failure policy `_failed` runs with the actor that was called."""
        called = self.actor

        async def failed(err: Exception) -> None:
            nonlocal called
            await self._failed(err, called)
            called = self.actor

        return await supervised(call, failed)

    async def _failed(self, err: Exception, called: Any) -> None:
        """The role's failure policy: raise the error that ends the run, or return once the role is back."""
        raise NotImplementedError

    async def _respawn_once(self, called: Any, respawn: Callable[[], Awaitable[None]]) -> None:
        """`respawn()` once per failure of the actor `called`, however many calls saw it fail."""
        async with self._respawning:
            if self.actor is called:
                await respawn()

    async def stop(self) -> None:
        if self.procs_file.reachable(self.role):
            await stop_quietly(self.procs)
