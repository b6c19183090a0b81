"""Two-seat games for the seat tests (envs/seats.py): a relay environment, the policy (or the
snapshot) saying scripted moves, and a SeatRunner over them."""

import asyncio

from forge_async.data.episode import Completion
from forge_async.envs.environment import EnvStep, ModelTurn, SeatTurn
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.envs.seats import ModelPlayer, SeatRunner
from forge_async.generation.config import SamplingConfig
from forge_async.tasks.task import Prompt
from tests.support.scripted import BYTES


class Relay:
    """Two seats take turns; each sees the other's last move. Ends after `moves` moves: seat 0
    wins (+1) if its last move was "w"."""

    seats = 2

    def __init__(self, moves: int = 4):
        self.moves, self.played = moves, []

    def reset(self, prompt: Prompt) -> SeatTurn:
        return SeatTurn(0, "go")

    def step(self, turn: ModelTurn) -> EnvStep:
        self.played.append(turn.text)
        if len(self.played) == self.moves:
            won = self.played[-2] == "w"
            return EnvStep(done=True, rewards={0: 1.0 if won else -1.0, 1: -1.0 if won else 1.0})
        return EnvStep(observation=f"[{turn.text}]", seat=len(self.played) % 2)


class Moves:
    """The policy at any seat: says its scripted moves in order (byte tokens, then EOS)."""

    def __init__(self, moves: list[str]):
        self.moves, self.prompts = list(moves), []

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        self.prompts.append(prompt_ids)
        text = self.moves.pop(0)
        ids = BYTES.encode(text, add_special_tokens=False) + [BYTES.eos_token_id]
        return Completion(prompt_ids, ids, [-0.3] * len(ids), [2] * len(ids), text, "stop")


def seat_runner(
    env_factory,
    seats: list[str],
    max_turns: int = 8,
    context: int = 256,
    snapshot: ModelPlayer | None = None,
    rival: ModelPlayer | None = None,
) -> SeatRunner:
    limits = EpisodeLimits(max_turns, context, context)
    runner = EnvRunner(env_factory, BYTES, SamplingConfig(max_tokens=8), limits, timeout_s=5.0)
    return SeatRunner(runner, seats, snapshot, rival)


def play(runner: SeatRunner, model) -> list[Completion]:
    return asyncio.run(runner.play(Prompt([], "", text="x"), model))
