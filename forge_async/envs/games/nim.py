"""Single-pile Nim, a two-player game the tiny digits model can learn on CPU (`env.name=nim`).

The seed deals a pile of MIN_PILE..MAX_PILE objects and the seat that moves first. A seat sees the
pile it faces, as digits ("11"), and takes 1, 2 or 3 objects (no more than are left) by saying the
digit; whoever takes the last object wins (+1, the other seat -1). Any other turn (another digit,
EOS alone, more than one digit) loses the game for the seat that said it.

Every observation and move is digits, so the digits tokenizer (14 tokens) plays it: the first
observation is the prompt "<bos>11<sep>", each later one "7<sep>" after the seat's move. Each turn
lists its legal moves (`SeatTurn.moves`), which is what a random seat picks from.

The game is solved: leaving a multiple of 4 wins, so a seat facing a pile that is not one takes
`pile % 4`. `perfect` plays that; `best_win_rate` is what the best player wins against the random
seat (docs/multiplayer.md, Nim).
"""

import random
from functools import cache

from forge_async.envs.environment import EnvStep, ModelTurn, SeatTurn
from forge_async.envs.textarena import episode_seed
from forge_async.tasks.task import Prompt

MIN_PILE, MAX_PILE = 5, 15
MAX_TAKE = 3


def deal(seed: int) -> tuple[int, int]:
    """The seed's (pile, seat that moves first)."""
    rng = random.Random(seed)
    return rng.randint(MIN_PILE, MAX_PILE), rng.randrange(2)


def legal_moves(pile: int) -> list[str]:
    return [str(take) for take in range(1, min(MAX_TAKE, pile) + 1)]


class Nim:
    """One game of single-pile Nim between seats 0 and 1."""

    seats = 2

    def __init__(self) -> None:
        self.pile, self.seat = 0, 0

    def reset(self, prompt: Prompt) -> SeatTurn:
        self.pile, self.seat = deal(episode_seed(prompt))
        return SeatTurn(self.seat, str(self.pile), legal_moves(self.pile))

    def step(self, turn: ModelTurn) -> EnvStep:
        mover, other = self.seat, 1 - self.seat
        if turn.text.strip() not in legal_moves(self.pile):
            return EnvStep(done=True, rewards={mover: -1.0, other: 1.0})
        self.pile -= int(turn.text)
        if self.pile == 0:
            return EnvStep(done=True, rewards={mover: 1.0, other: -1.0})
        self.seat = other
        return EnvStep(observation=str(self.pile), seat=other, moves=legal_moves(self.pile))


def perfect(observations: list[str], seat: int) -> str:
    """A scripted seat (`env.seats=[policy,forge_async.envs.games.nim:perfect]`): leaves a multiple
    of 4 when it can, else takes 1."""
    pile = int(observations[-1])
    return str(pile % (MAX_TAKE + 1) or 1)


@cache
def _best_wins(pile: int) -> float:
    """The chance that the best player, to move at `pile`, beats the random seat."""
    return max(1.0 if take == pile else 1.0 - _random_wins(pile - take) for take in range(1, min(MAX_TAKE, pile) + 1))


@cache
def _random_wins(pile: int) -> float:
    """The chance that the random seat, to move at `pile`, beats the best player."""
    takes = range(1, min(MAX_TAKE, pile) + 1)
    return sum(1.0 if take == pile else 1.0 - _best_wins(pile - take) for take in takes) / len(takes)


def best_win_rate(seeds: list[int], seat: int = 0) -> float:
    """What the best player at `seat` wins against the random seat over the games `seeds` deal, on
    average over the random seat's moves: the game's optimum against random."""
    chances = []
    for seed in seeds:
        pile, first = deal(seed)
        chances.append(_best_wins(pile) if first == seat else 1.0 - _random_wins(pile))
    return sum(chances) / len(chances)
