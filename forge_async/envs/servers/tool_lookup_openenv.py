"""tool_lookup served the OpenEnv way: the native environment (envs/games/tool_lookup.py) behind
OpenEnv's server, so its episodes are the native ones, played over a WebSocket.

    uvicorn forge_async.envs.servers.tool_lookup_openenv:app --host 127.0.0.1 --port 8000
    python -m apps.grpo --config-name tool_lookup_openenv     # serves it itself

reset(prompt, meta, eos_token_id) takes the task's prompt as env.name=openenv sends it
(task.name=tool_lookup: meta holds the key and the hidden table) and shows the prompt's
text; an action is the model's turn, its text and token ids (the reward checks for EOS).
A worker holds up to FORGE_OPENENV_SESSIONS sessions at once (default 64).
"""

import os
from typing import Any

from forge_async.envs.openenv.server_process import SESSIONS_VARIABLE  # first: OpenEnv's web UI left out
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from forge_async.envs.environment import ModelTurn
from forge_async.tasks.task import Prompt
from forge_async.envs.games.tool_lookup import ToolLookupEnv


class TurnAction(Action):
    message: str
    token_ids: list[int] = []


class TextObservation(Observation):
    message: str = ""


class ToolLookupServerEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True  # no state shared between sessions

    def __init__(self):
        super().__init__()
        self._state = State()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, prompt: str = "", meta: dict | None = None,
        eos_token_id: int | None = None, **kwargs: Any,
    ) -> TextObservation:  # fmt: skip
        self._state = State(episode_id=episode_id)
        self.episode = ToolLookupEnv(eos_token_id)
        self.episode.reset(Prompt(token_ids=[], answer="", text=prompt, meta=meta or {}))
        return TextObservation(message=prompt)

    def step(self, action: TurnAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        turn = ModelTurn(action.message, action.token_ids, finish_reason="stop", index=self._state.step_count)
        self._state.step_count += 1
        step = self.episode.step(turn)
        return TextObservation(message=step.observation or "", reward=step.reward, done=step.done)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    ToolLookupServerEnv, TurnAction, TextObservation, env_name="tool_lookup",
    max_concurrent_envs=int(os.environ.get(SESSIONS_VARIABLE, "64")),
)  # fmt: skip
