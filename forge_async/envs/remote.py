"""Environments on EnvironmentHost actors (env.procs >= 1), seen from the controller.

`RemoteEnvironments` is the runner's environment factory: each episode gets a
`RemoteEnvironment`, a proxy whose async reset/step/close run on one of the hosts
(episodes spread round-robin). The runner treats it like any async environment:
env.timeout_s bounds each call, an error the environment raised drops the episode.
A host that cannot be reached at all is an EnvironmentFailed: the run ends cleanly.
"""

import itertools

from forge_async.tasks.task import Prompt
from forge_async.envs.environment import EnvStep, ModelTurn, Observation
from forge_async.mesh.supervision import failure_cause


class EnvironmentFailed(RuntimeError):
    """A proc hosting environments failed: no episode can be played there any more."""


class RemoteEnvironment:
    def __init__(self, host, where: str, episode: int):
        self.host, self.where, self.episode = host, where, episode

    async def reset(self, prompt: Prompt) -> Observation:
        return await self._call(self.host.reset, prompt)

    async def step(self, turn: ModelTurn) -> EnvStep:
        return await self._call(self.host.step, turn)

    async def close(self) -> None:
        await self._call(self.host.close)

    async def _call(self, endpoint, *args):
        try:
            value, error = await endpoint.call_one(self.episode, *args)
        except Exception as err:
            raise EnvironmentFailed(f"environment proc ({self.where}) failed: {failure_cause(err)}") from None
        if error is not None:
            raise error
        return value


class RemoteEnvironments:
    """One RemoteEnvironment per call, on the hosts in turn."""

    def __init__(self, hosts: list[tuple[object, str]]):
        self.hosts = itertools.cycle(hosts)
        self.episodes = itertools.count()

    def __call__(self) -> RemoteEnvironment:
        host, where = next(self.hosts)
        return RemoteEnvironment(host, where, next(self.episodes))
