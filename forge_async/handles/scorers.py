"""Model scorers' meshes (a reference policy, a teacher): one LogprobModel proc each.

A scorer whose proc dies ends the run with a ScorerFailed naming it (the trainer
is fine: the run saves what it learned).
"""

from typing import Any

from monarch.actor import ProcMesh

from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.mesh.supervision import failure_cause
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner
from forge_async.observability.spans import Span
from forge_async.scoring.scorer import ScorerFailed


class ScorerModelHandle(RoleHandle):
    """Model scorer `index` of the `scorers` list, on its own proc."""

    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, index: int):
        super().__init__(spawner, procs_file, roles.scorer(index))
        self.index = index
        self.label = spawner.plan.scorers[index].label

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        return await self.spawner.scorer(self.index)

    async def completion_logprobs(
        self, prompt_ids: list[list[int]], completion_ids: list[list[int]]
    ) -> list[list[float]]:
        """log p of each completion token given its prompt, under the scorer's model, over the whole
        vocabulary at the run's temperature."""
        call = self.actor.completion_logprobs
        return await self._call(lambda: call.call_one(prompt_ids, completion_ids))

    async def take_version(self, version: int) -> int:
        """A teacher that is the policy itself: copy the trainer's `version` aside (scoring/self_teacher.py)."""
        return await self._call(lambda: self.actor.take_version.call_one(version))

    async def use_taken(self) -> int:
        """A teacher that is the policy itself: load the version copied aside; returns the one it holds."""
        return await self._call(lambda: self.actor.use_taken.call_one())

    async def _failed(self, err: Exception, called: Any) -> None:
        raise ScorerFailed(f"scorer {self.label!r} ({self.located()}) failed: {failure_cause(err)}") from None

    async def trace_spans(self) -> list[Span]:
        return await self.actor.trace_spans.call_one()
