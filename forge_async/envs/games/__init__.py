"""Built-in games, small enough for the tiny digits model to learn on CPU; envs/registry.py
builds them by name.

    nim          single-pile Nim, two players on the multi-seat Environment protocol
                 (envs/environment.py): take 1-3, whoever takes the last object wins
                 (games/nim.py); named by `env.name` alone
    tool_lookup  one player, two turns: call a lookup tool, answer with its reply
                 (games/tool_lookup.py); named by `task.name`: it deals its own prompts and
                 brings the environment they are played in
"""

from forge_async.envs.games.nim import Nim
from forge_async.envs.games.tool_lookup import ToolLookupTask
from forge_async.errors import ConfigError
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.registry import TaskBuilder
from forge_async.tasks.task import Task

# env.name -> the game's Environment class (its `seats`: how many play it)
GAMES = {"nim": Nim}


def _tool_lookup(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    return ToolLookupTask(tokenizer, max_prompt_tokens)


# task.name -> the builder of a game that deals its own prompts
GAME_TASKS: dict[str, TaskBuilder] = {"tool_lookup": _tool_lookup}


def check_game_seats(name: str, seats: list[str]) -> None:
    """One ConfigError at start if env.seats does not name as many seats as the game has."""
    wanted = GAMES[name].seats
    if len(seats) != wanted:
        raise ConfigError(
            f"env.name={name} is a game of {wanted} players: env.seats must name {wanted} seats, "
            f"e.g. [policy,policy] (self-play) or [policy,random]; got {list(seats)}"
        )
