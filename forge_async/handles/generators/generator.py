"""One generator: its proc and vLLM engine, the calls made to it, and the pace it keeps.

A call whose proc dies is made again on the generator respawned in its place (`_respawn`),
within the restarts its pool allows (lives.py); one that cannot be respawned (its node no
longer answers) is lost, and every call to it raises GeneratorLost.
"""

import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from monarch.actor import ProcMesh

from forge_async.data.episode import Completion
from forge_async.generation.config import SamplingConfig
from forge_async.handles.generators.failures import GeneratorLost
from forge_async.handles.generators.lives import GeneratorLives
from forge_async.handles.generators.pace import Pace
from forge_async.handles.handle import RoleHandle
from forge_async.handles.procs_file import ProcsFile
from forge_async.handles.spawner import RoleSpawner
from forge_async.mesh import roles
from forge_async.mesh.located import Where
from forge_async.mesh.reply_port import ReplyPort
from forge_async.mesh.supervision import T, is_proc_failure, stop_quietly, within
from forge_async.weights.outcomes import Loaded, ReceiverLost

_RESPAWN_TIMEOUT_S = 40  # a generator that cannot be respawned in this long: its node is gone
ANSWER_TIMEOUT_S = 10  # a question (stats, sampler state) that a generator answers at once, unless hung


class GeneratorHandle(RoleHandle):
    def __init__(
        self,
        spawner: RoleSpawner,
        procs_file: ProcsFile,
        index: int,
        lives: GeneratorLives,
        proc_index: int | None = None,
    ):
        """`index`: its place in its pool; `proc_index`: its proc's (`generator<proc_index>`, placed
        as placement.generator_hosts say), which a snapshot's generators take after the trained
        policy's; None: `index`."""
        self.proc_index = index if proc_index is None else proc_index
        super().__init__(spawner, procs_file, roles.generator(self.proc_index))
        self.index = index
        self.lives = lives  # the pool's: restarts left, generators lost
        self.pace = Pace()
        self.engine_start_s = 0.0  # its engine's start-up, at its last spawn
        self.unanswering = False  # it left a question unanswered (hung, or failed), until respawned
        self._replies = ReplyPort()  # generate calls, many a step, and loads: answered on one port

    async def _spawn(self) -> tuple[ProcMesh, Any]:
        procs, actor, self.engine_start_s = await self.spawner.generator(self.proc_index)
        return procs, actor

    def node(self) -> int:
        """The node it is placed on."""
        return self.spawner.plan.placement.generator_host(self.proc_index)

    # Calls (one whose proc dies is made again on the respawned generator)

    async def generate(self, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int) -> list[list[Completion]]:
        """`n` completions of each prompt."""
        with self.pace.generating(len(prompt_ids) * n):
            return await self._call(lambda: self._generate_once(prompt_ids, sampling, n))

    async def _generate_once(
        self, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]:
        """One try of a generate call; its samples are counted lost if its proc dies meanwhile."""
        try:
            return await self._replies.call_one(self.actor.generate, prompt_ids, sampling, n, alive=self.actor.where)
        except Exception as err:
            if is_proc_failure(err):
                self.lives.lost_requests += len(prompt_ids) * n
            raise

    async def version(self) -> int:
        """The policy version it samples with now."""
        return await self._call(lambda: self.actor.get_version.call_one())

    async def hold_weights(self, hold: bool) -> int:
        """Keep (True) or release (False) its weights; returns their version."""
        return await self._call(lambda: self.actor.hold_weights.call_one(hold))

    async def load_version(self, version: int) -> Loaded | ReceiverLost:
        """Load `version` from torchstore, or be lost (its node is gone)."""
        try:
            return await self._call(
                lambda: self._replies.call_one(self.actor.load_version, version, alive=self.actor.where)
            )
        except GeneratorLost as lost:
            return ReceiverLost(str(lost))

    async def take_version(self, version: int) -> int:
        """Copy the trainer's `version` aside (a lagged snapshot's next weights); returns which it copied."""
        return await self._call(lambda: self.actor.take_version.call_one(version))

    async def use_taken(self) -> Loaded | ReceiverLost:
        """Swap in the version copied aside, or be lost (its node is gone)."""
        try:
            return await self._call(lambda: self._replies.call_one(self.actor.use_taken, alive=self.actor.where))
        except GeneratorLost as lost:
            return ReceiverLost(str(lost))

    async def set_rng_state(self, state: Any) -> None:
        await self._call(lambda: self.actor.set_rng_state.call_one(state))

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        self.lives.raise_if_lost(self.index)
        return await super()._call(call)

    # Questions, answered as it is (None from one lost or failed; no respawn)

    async def answer(self, question: Callable[[Any], Awaitable[T]]) -> T | None:
        """`question(actor)`'s answer; None if it is lost, has failed, or has not answered within
        ANSWER_TIMEOUT_S (a hung engine). One that did not answer is asked nothing more until it is
        respawned, so a run's stop is not held up by it."""
        if self.index in self.lives.lost or self.unanswering:  # a call might not even end
            return None
        try:
            return await within(question(self.actor), ANSWER_TIMEOUT_S)
        except TimeoutError:
            self.unanswering = True
            print(f"generator {self.index} did not answer within {ANSWER_TIMEOUT_S} s: left out", flush=True)
        except Exception as err:
            if not is_proc_failure(err):
                raise
            self.unanswering = True
        return None

    # Its failure policy: respawned within the pool's restarts, or lost with its node

    async def _failed(self, err: Exception, called: Any) -> None:
        async with self._respawning:  # once per failure, however many calls saw it
            self.lives.raise_if_lost(self.index)
            if self.actor is called:
                await self._respawn(err)

    async def _respawn(self, err: Exception) -> None:
        where = self.procs_file.one(self.role)
        if not self.procs_file.hosts.reachable(where.node):  # the host is gone: no respawn to count
            self._lose_unrespawned(f"node {where.node} does not answer")
        self.lives.take_restart(f"generator {self.index} ({self.located()}) failed", err)
        start = time.perf_counter()
        print(
            f"generator {self.index} ({self.located()}) failed; "
            f"respawning (restart {self.lives.restarts}/{self.lives.max_restarts}) ...",
            flush=True,
        )
        await stop_quietly(self.procs)
        try:
            await within(self.start(), _RESPAWN_TIMEOUT_S)
        except Exception as respawn_err:  # its node is gone (or cannot start procs)
            self._lose_unrespawned(f"{type(respawn_err).__name__} {respawn_err}")
        self.unanswering = False
        await self.replaced()
        print(f"generator {self.index} back in {time.perf_counter() - start:.1f}s", flush=True)

    async def replaced(self) -> None:
        """A new actor in its place: brought the newest weights (`on_replaced`) before calls go to it."""
        if self.lives.on_replaced is not None:
            await self.lives.on_replaced(self.index, self.actor)

    def _lose_unrespawned(self, why: str) -> None:
        """It failed and cannot be brought back: lost (GeneratorLost), or the last (GeneratorFailed)."""
        node = self.procs_file.one(self.role).node
        self.lose(f"failed and cannot be respawned on node {node}: {why}")
        raise GeneratorLost(self.lives.lost[self.index])

    def lose(self, why: str) -> None:
        """It is lost (`why`): no more calls go to it; GeneratorFailed if it was the last."""
        if self.index not in self.lives.lost:
            self.lives.lose(self.index, f"generator {self.index} ({self.located()}) {why}")

    def kill_if_hung_here(self) -> None:
        """SIGKILL its proc if it left a question unanswered and runs on the controller's host: its
        stop would only time out."""
        where = self.procs_file.where.get(str(self.role))
        if self.unanswering and isinstance(where, Where) and where.host == self.procs_file.controller.host:
            try:
                os.kill(where.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
