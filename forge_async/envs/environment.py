"""The Environment protocol, and its config section.

An episode with an environment alternates model turns and observations:

    observation = env.reset(prompt)              # the first one: what the model sees first
    loop: model turn -> env.step(turn) -> EnvStep(observation, reward, done)

An observation is text (rendered as a `tool` message with the tokenizer's chat
template, envs/templating.py) or token ids (used as they are). The episode's
reward is the sum of the step rewards. Methods may be coroutines (awaited, with
`env.timeout_s`; run many at once) or plain functions (called on the controller's
event loop: keep them fast). One Environment object serves one episode.

A multi-seat environment (several players, `env.seats`) names who moves at each turn:

    turn = env.reset(prompt)                     # SeatTurn(seat, observation): who moves first, what it sees
    loop: that seat's turn -> env.step(turn) -> EnvStep(observation, seat=next seat, done=False)
                                                or EnvStep(done=True, rewards={seat: reward, ...})

An observation there is what that seat sees new since its own last turn; `moves` (optional) lists
the moves that seat may make, for a random seat (a text game shows them bracketed instead). Each seat is played
by the policy or by a scripted player (envs/seats.py); each policy seat's turns and
observations make a completion of their own, rewarded with its seat's reward.
"""

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

from forge_async.tasks.task import Prompt

Observation = str | list[int]


@dataclass
class ModelTurn:
    """What the model said in one turn."""

    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (it ended its turn) or "length" (sampling.max_tokens cut it)
    index: int  # 0 for the first turn


@dataclass
class EnvStep:
    observation: Observation | None = None  # what the model sees next (None or "" when done)
    reward: float = 0.0
    done: bool = False
    # With done: the episode's final answer, which the task's reward scores as if the model had
    # said it and stopped (added to the step rewards). An agent program that returns text gives one.
    answer: str | None = None
    # Multi-seat environments: the seat that moves next (`observation` is what it sees), and with
    # done each seat's reward (`reward` is not used there).
    seat: int | None = None
    rewards: dict[int, float] | None = None
    moves: list[str] | None = None  # the moves the next seat may make (a random seat picks one)


@dataclass
class SeatTurn:
    """A multi-seat environment's call for a turn: which seat moves, and what it sees new."""

    seat: int
    observation: Observation | None  # None (a step's): nothing new
    moves: list[str] | None = None  # the moves the seat may make (a random seat picks one)


class Environment(Protocol):
    # A multi-seat environment's reset says which seat moves first (SeatTurn).
    def reset(self, prompt: Prompt) -> Observation | SeatTurn | Awaitable[Observation | SeatTurn]: ...

    def step(self, turn: ModelTurn) -> EnvStep | Awaitable[EnvStep]: ...

    # Optional: `close()` (sync or async), called when the episode ends, however it ends.
