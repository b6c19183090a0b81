"""EnvironmentHost: environments on a proc of their own (env.procs >= 1), one object per episode.

For environments that are heavy (a simulator, a sandbox) or blocking: they run off the
controller's event loop, plain methods in a worker thread (so env.timeout_s bounds them
too), and several hosts share the episodes. The endpoints are concurrent: a Monarch
actor otherwise handles one message at a time, and one hung step would hold up every
episode of the host. An environment's own error comes back as a
value and is raised again in the controller (the episode is dropped, env_error); an
exception of the call itself means the proc failed (envs/remote.py: EnvironmentFailed).
"""

import asyncio
import inspect
import pickle
from collections.abc import Callable

from monarch.actor import concurrent_endpoint, endpoint

from forge_async.mesh.proc_actor import ProcActor
from forge_async.tasks.task import Prompt
from forge_async.envs.environment import Environment, ModelTurn

Outcome = tuple[object, Exception | None]  # (what the method returned, or the error it raised)


class EnvironmentHost(ProcActor):
    def __init__(self, new_environment: Callable[[], Environment]):
        self.new_environment = new_environment
        self.episodes: dict[int, Environment] = {}

    @endpoint
    async def prepare(self) -> None:
        """Before the first episode: what the factory runs in each process that plays its episodes
        (an agent endpoint: envs/agent/), started now, if it has any."""
        prepare = getattr(self.new_environment, "prepare_process", None)
        if prepare is not None and not inspect.isclass(self.new_environment):
            await prepare()

    @concurrent_endpoint
    async def reset(self, episode: int, prompt: Prompt) -> Outcome:
        try:
            self.episodes[episode] = self.new_environment()
        except Exception as err:
            return None, _sendable(err)
        return await _outcome(self.episodes[episode].reset, prompt)

    @concurrent_endpoint
    async def step(self, episode: int, turn: ModelTurn) -> Outcome:
        return await _outcome(self.episodes[episode].step, turn)

    @concurrent_endpoint
    async def close(self, episode: int) -> Outcome:
        env = self.episodes.pop(episode, None)
        close = getattr(env, "close", None)
        return await _outcome(close) if close is not None else (None, None)


async def _outcome(method, *args) -> Outcome:
    try:
        if inspect.iscoroutinefunction(method):
            return await method(*args), None
        return await asyncio.to_thread(method, *args), None
    except Exception as err:
        return None, _sendable(err)


def _sendable(err: Exception) -> Exception:
    """`err`, or a RuntimeError saying what it was if it cannot travel back to the controller."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return RuntimeError(f"{type(err).__name__}: {err}")
