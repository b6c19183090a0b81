"""A two-player OpenEnv game for tests/test_openenv_seats.py: the players take turns adding 1 or 2
to a running total; whoever brings it to 10 wins.

    uvicorn tests.openenv_servers.race_to_ten:app

The observation names the player who moves next (`current_player_id`) and tells that player the
total; the step reward is the mover's, and every player's reward at the end is in the state
(`raw_state.rewards`), the way OpenEnv's textarena_env gives a multi-player game's.
"""

import os
from typing import Any

from forge_async.envs.openenv.server_process import SESSIONS_VARIABLE  # first: OpenEnv's web UI left out
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

TARGET = 10


class AddAction(Action):
    message: str = Field(..., description="[1] or [2]")


class TotalObservation(Observation):
    prompt: str = ""
    current_player_id: int = 0


class RaceState(State):
    raw_state: dict[str, Any] = Field(default_factory=dict)


class RaceToTen(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = RaceState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TotalObservation:
        self._state = RaceState(episode_id=episode_id, raw_state={"rewards": None})
        self.total, self.player = 0, 0
        return self._observation()

    def step(self, action: AddAction, timeout_s: float | None = None, **kwargs: Any) -> TotalObservation:
        self._state.step_count += 1
        self.total += 2 if "2" in action.message else 1
        if self.total >= TARGET:
            rewards = {self.player: 1.0, 1 - self.player: -1.0}
            self._state.raw_state = {"rewards": rewards}
            return TotalObservation(prompt=f"Player {self.player} wins.", reward=1.0, done=True)
        self.player = 1 - self.player
        return self._observation()

    def _observation(self) -> TotalObservation:
        text = f"You are Player {self.player}. The total is {self.total}. Add [1] or [2]."
        return TotalObservation(prompt=text, current_player_id=self.player, reward=0.0)

    @property
    def state(self) -> RaceState:
        return self._state


app = create_app(
    RaceToTen, AddAction, TotalObservation, env_name="race_to_ten",
    max_concurrent_envs=int(os.environ.get(SESSIONS_VARIABLE, "16")),
)  # fmt: skip
