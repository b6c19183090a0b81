"""Model scorers' meshes (a reference policy, a teacher): one LogprobModel proc each.

A scorer whose proc dies ends the run with a ScorerFailed naming it (the trainer
is fine: the run saves what it learned).
"""

from forge_async.handles.procs_file import ProcsFile, located
from forge_async.mesh.supervision import failure_cause, stop_quietly, supervised
from forge_async.mesh import roles
from forge_async.handles.spawner import RoleSpawner
from forge_async.scoring.scorer import ScorerFailed


class ScorerModelHandle:
    """Model scorer `index` of the `scorers` list, on its own proc."""

    def __init__(self, spawner: RoleSpawner, procs_file: ProcsFile, index: int):
        self.spawner = spawner
        self.procs_file = procs_file
        self.procs = None  # until start()
        self.index = index
        self.role = roles.scorer(index)
        self.label = spawner.config.scorers[index].label

    async def start(self) -> None:
        self.procs, self.actor = await self.spawner.scorer(self.index)
        self.procs_file.record(self.role, await self.actor.where.call_one())

    async def completion_logprobs(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        """log p of each completion token given its prompt, under the scorer's model."""
        return await supervised(
            lambda: self.actor.completion_logprobs.call_one(prompt_ids, completion_ids), self._failed
        )

    async def _failed(self, err: Exception) -> None:
        where = located(self.procs_file.where[str(self.role)])
        raise ScorerFailed(f"scorer {self.label!r} ({where}) failed: {failure_cause(err)}") from None

    async def trace_spans(self) -> list:
        return await self.actor.trace_spans.call_one()

    async def stop(self) -> None:
        if self.procs_file.reachable(self.role):
            await stop_quietly(self.procs)
