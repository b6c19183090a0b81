"""A tiny OpenEnv number game for tests/test_openenv_schema.py, whose action is an integer and
whose observation is structured: find the hidden number on a 3 x 3 board.

    uvicorn tests.openenv_servers.number_board:app

reset(seed) hides one of 1..9 (seed % 9 + 1) and shows the board; a guess (GuessAction.guess,
an int) crosses its cell out (0) and says "higher" or "lower", or ends the game with reward 1.
The observation also carries bookkeeping the model need not see (guesses left, legal moves).
"""

import os
from typing import Any

from forge_async.envs.openenv.server_process import SESSIONS_VARIABLE  # first: OpenEnv's web UI left out
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(..., description="a number from 1 to 9")


class BoardObservation(Observation):
    board: list[list[int]] = Field(default_factory=list)
    message: str = ""
    guesses_left: int = 3
    legal_moves: list[int] = Field(default_factory=list)


class NumberBoard(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> BoardObservation:
        self._state = State(episode_id=episode_id)
        self.target, self.board, self.left = (seed or 0) % 9 + 1, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], 3
        return self._observation("Find the hidden number: answer with one number.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> BoardObservation:
        self.left -= 1
        if action.guess == self.target:
            return self._observation("Found it.", reward=1.0, done=True)
        self.board = [[0 if cell == action.guess else cell for cell in row] for row in self.board]
        hint = "higher" if action.guess < self.target else "lower"
        return self._observation(f"{action.guess}: {hint}", done=self.left == 0)

    def _observation(self, message: str, reward: float = 0.0, done: bool = False) -> BoardObservation:
        legal = [cell for row in self.board for cell in row if cell]
        return BoardObservation(
            board=self.board, message=message, guesses_left=self.left, legal_moves=legal, reward=reward, done=done
        )

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    NumberBoard, GuessAction, BoardObservation, env_name="number_board",
    max_concurrent_envs=int(os.environ.get(SESSIONS_VARIABLE, "16")),
)  # fmt: skip
