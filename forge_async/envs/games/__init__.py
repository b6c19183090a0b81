"""Built-in two-player games on the multi-seat Environment protocol (envs/environment.py), named by
`env.name` alone (envs/registry.py): small enough for the tiny digits model to learn on CPU.

    nim    single-pile Nim: take 1-3, whoever takes the last object wins (games/nim.py)
"""

from forge_async.envs.games.nim import Nim
from forge_async.errors import ConfigError

# env.name -> the game's Environment class (its `seats`: how many play it)
GAMES = {"nim": Nim}


def check_game_seats(name: str, seats: list[str]) -> None:
    """One ConfigError at start if env.seats does not name as many seats as the game has."""
    wanted = GAMES[name].seats
    if len(seats) != wanted:
        raise ConfigError(
            f"env.name={name} is a game of {wanted} players: env.seats must name {wanted} seats, "
            f"e.g. [policy,policy] (self-play) or [policy,random]; got {list(seats)}"
        )
