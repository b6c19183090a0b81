"""A teacher that is the policy itself some steps ago (`{kind: teacher, model: self, lag: K,
refresh_steps: M}`): self-distillation against a lagged copy, refreshed during the run.

Its LogprobModel proc (actors/logprob_model.py) starts from the initial policy and is fed
the trainer's published weights through the trainer's shared-memory channel, as the
generators on the trainer's node are. Weight delivery tells this of each version published
(`published`); when version k * M - K is published the proc copies it aside (`take_version`:
the channel keeps the newest two versions only), and when version k * M is published it
loads that copy (`use_taken`). So from version k * M on the teacher is version k * M - K: it is
refreshed every M steps, K steps behind the version that refreshes it (0 <= K <= M). These
run in order, beside the training loop, which never waits for them; a version published
before the one taken aside is copied (the proc is slow to answer) is taken in its place, and
the teacher's version says which (`distill/teacher_version`).
"""

import asyncio
from typing import Protocol

from forge_async.scoring.config import ScorerConfig


class TeacherModel(Protocol):
    """The teacher's proc (handles/scorers.py: ScorerModelHandle)."""

    async def take_version(self, version: int) -> int: ...

    async def use_taken(self) -> int: ...


class SelfTeacher:
    def __init__(self, config: ScorerConfig, model: TeacherModel):
        self.lag = config.lag
        self.refresh_steps = config.refresh_steps
        self.model = model
        self.version = 0  # the version the teacher's model holds
        self.newest = 0  # the trainer's newest version published
        self.refreshes = 0
        self._work: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._worker: asyncio.Task | None = None

    def published(self, version: int) -> None:
        """The trainer published `version`: take it aside, refresh the teacher, or both, in the
        order that keeps K steps between them (K = 0: take, then load; else load, then take)."""
        self.newest = version
        steps = []
        if (version + self.lag) % self.refresh_steps == 0:
            steps.append(("take", version))
        if version % self.refresh_steps == 0:
            steps.insert(0 if self.lag else 1, ("use", version))
        for step in steps:
            self._work.put_nowait(step)
        if steps and self._worker is None:
            self._worker = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            what, version = await self._work.get()
            if what == "take":
                await self.model.take_version(version)
            else:
                self.version = await self.model.use_taken()
                self.refreshes += 1

    def check(self) -> None:
        """Raise the worker's failure (the teacher's proc failed)."""
        task = self._worker
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()

    def metrics(self) -> dict[str, float]:
        """The teacher's version, its lag behind the trainer's newest, its refreshes so far."""
        return {
            "distill/teacher_version": self.version,
            "distill/teacher_lag": self.newest - self.version,
            "distill/teacher_refreshes": self.refreshes,
        }

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
