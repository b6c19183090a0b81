"""TextArena games as environments: `env.name=textarena:GAME` (a game id, e.g. GuessTheNumber-v0;
docs/environments.md). A single-player game by default; with `env.seats` a game of that many
players, each seat a player (envs/seats.py): TicTacToe-v0, KuhnPoker-v0, Nim-v0.

Each episode makes the game's `-raw` variant, whose observations are the messages new
since the last one, and resets it with the episode's seed (the prompt's `meta["seed"]`,
task.name=seeds; else a seed derived from the prompt). Then:

    reset   the game's opening messages                      (the first observation)
    step    the turn's text is the action -> the game's new messages, the turn's own echo left out
    done    the game's reward, from `close()`: TextArena gives rewards only when a game closes

With several players, each observation is the messages new to the player whose turn it is
(SeatTurn), and the rewards are every player's.

Invalid moves are the game's business: a single-player game warns once, then ends the
game with its own penalty; a multi-player game ends at once, the mover losing. A game that raises, or ends with a reward that is not a number,
drops its episode (textarena_error). Before any proc starts, `check_game` also plays the
game a few times with random moves, so that a game broken inside TextArena (some are, in
textarena 0.7.4) is named there rather than dropping most of a run's episodes.

TextArena games draw from Python's global `random` (a game's state seeds it). Each game
here keeps a random state of its own, swapped in around its calls, so that the episodes
of a group, played interleaved in one process, deal and play the same game.
"""

import difflib
import math
import numbers
import random
import re
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from importlib.metadata import version
from typing import Any

from forge_async.envs.environment import EnvStep, ModelTurn, Observation, SeatTurn

from forge_async.envs.config import TextArenaConfig
from forge_async.envs.runner import EnvFactory, EpisodeDropped
from forge_async.envs.seats import shown_moves
from forge_async.errors import ConfigError
from forge_async.process.interpreter import python
from forge_async.tasks.seeds import seed_prompt
from forge_async.tasks.task import Prompt

TEXTARENA = "textarena:"  # env.name=textarena:GAME
_RAW = "-raw"  # the variant whose observations are the new messages only, unrendered
PLAYTEST_SEEDS = (0, 1, 2)  # the games check_game plays with random moves
PLAYTEST_MOVES = 24  # the most moves of each


class TextArenaError(ConfigError):
    """A game that cannot be played here: unknown, not of the seats' player count, or needing what is missing."""


def make_game(game: str, config: TextArenaConfig):
    """A new, unreset TextArena env of `game`'s raw variant, actions bracketed if configured."""
    import textarena  # imported where used: only runs that play TextArena pay for it
    from textarena.wrappers import ActionFormattingWrapper

    env = textarena.make(env_id=game + _RAW, **config.game_kwargs)
    return ActionFormattingWrapper(env) if config.bracket_actions else env


def check_game(game: str, config: TextArenaConfig, players: int = 1) -> None:
    """One TextArenaError naming the game if it cannot be made, reset for `players` players and
    closed, here and offline: called before any proc starts."""
    from textarena import SinglePlayerState
    from textarena.envs.registration import ENV_REGISTRY

    where = f"env.name={TEXTARENA}{game}"
    if game + _RAW not in ENV_REGISTRY:
        games = [name[: -len(_RAW)] for name in ENV_REGISTRY if name.endswith(_RAW)]
        close = difflib.get_close_matches(game, games, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "name a base game id such as GuessTheNumber-v0"
        raise TextArenaError(f"{where}: no such TextArena game; {hint}")
    outer = random.getstate()
    try:
        env = make_game(game, config)
        hosted = _hosted_models(env)
        if hosted and not config.online:
            raise TextArenaError(
                f"{where} calls a hosted model ({', '.join(hosted)}): it is not offline; "
                "env.textarena.online=true plays it (with its API key)"
            )
        env.reset(num_players=players, seed=0)
        env.get_observation()
        alone = isinstance(env.state, SinglePlayerState)
        env.close()
    except TextArenaError:
        raise
    except LookupError as err:  # NLTK data, which TextArena tries to download at import
        resource = re.search(r"Resource '?([\w/.-]+)'? not found", str(err))
        name = resource.group(1) if resource else "a resource"
        raise TextArenaError(
            f"{where} needs NLTK data that is not installed ({name}): "
            f"{python()} -m nltk.downloader {name}, or pick a game that needs none (docs/environments.md)"
        ) from None
    except Exception as err:  # ValueError for a missing API key; whatever a broken game raises
        raise TextArenaError(f"{where} cannot be played here: {_why(err, players)}") from None
    finally:
        random.setstate(outer)
    if players == 1 and not alone:  # a multiplayer game that accepts one player at reset
        raise TextArenaError(f"{where} cannot be played here: it is not a single-player game")
    if not hosted:  # a hosted model's game is not played here: each move would be a call to it
        playtest(game, config, players)


def playtest(game: str, config: TextArenaConfig, players: int = 1) -> None:
    """One TextArenaError naming the game if it fails in a few games of random moves, played as
    episodes play them: ThreeCardMonte-v0 and Countdown-v0 of textarena 0.7.4 pass their invalid
    moves' reason and reward in the wrong order, and fail on the first invalid move."""
    for seed in PLAYTEST_SEEDS:
        moves: list[str] = []
        env = TextArenaEnv(game, config, players)
        try:
            chooser = random.Random(seed)
            opening = env.reset(seed_prompt(seed))
            candidates = random_moves(_text(opening.observation if isinstance(opening, SeatTurn) else opening))
            done = False
            while not done and len(moves) < PLAYTEST_MOVES:
                moves.append(chooser.choice(candidates))
                step = env.step(ModelTurn(moves[-1], [], "stop", len(moves) - 1))
                done = step.done
                if players > 1 and not done:
                    candidates = random_moves(_text(step.observation)) + candidates
            env.close()
        except EpisodeDropped as err:
            played = f"seed {seed}, move {len(moves)}: {moves[-1]!r}" if moves else f"seed {seed}, at reset"
            raise TextArenaError(
                f"env.name={TEXTARENA}{game}: TextArena game {game} fails inside textarena {version('textarena')} "
                f"when played with random moves ({played}): {str(err).removeprefix(game + ' ')}; "
                "pick another game (docs/environments.md lists those that pass)"
            ) from None


def _text(observation: Observation | None) -> str:
    """A TextArena observation: text (TextArenaEnv gives nothing else)."""
    if not isinstance(observation, str):
        raise TypeError(f"a TextArena observation is text, not {observation!r}"[:200])
    return observation


def random_moves(opening: str) -> list[str]:
    """Moves to play at random: the bracketed ones the game's opening shows (its format, e.g.
    `[A C]`), its words bare and bracketed, small numbers bracketed, and text that is no move."""
    shown = shown_moves(opening)
    words = sorted(set(re.findall(r"[A-Za-z]{2,}|\d+", opening)))[:40]
    return shown + words + [f"[{word}]" for word in words] + [f"[{n}]" for n in range(10)] + ["", "no move"]


def _hosted_models(env) -> list[str]:
    """The game's attributes that are TextArena agents: models it calls over the network."""
    import textarena

    while isinstance(env, textarena.Wrapper):
        env = env.env
    return [
        f"{name}: {type(value).__name__}" for name, value in vars(env).items() if isinstance(value, textarena.Agent)
    ]


def _why(err: Exception, players: int) -> str:
    text = f"{type(err).__name__}: {err}"
    if "API key" in text:
        return f"it calls a hosted model and needs an API key ({err})"
    if (isinstance(err, AssertionError) or "players" in text) and players == 1:
        return f"it is not a single-player game ({err})"
    if isinstance(err, AssertionError) or "players" in text:
        return f"it is not a game of {players} players, as env.seats names ({err})"
    if "unexpected keyword argument" in text:
        return f"env.textarena.game_kwargs: {err}"
    return text


def episode_seed(prompt: Prompt) -> int:
    """The prompt's `meta["seed"]` (task.name=seeds), else a stable seed derived from the prompt."""
    if "seed" in prompt.meta:
        return int(prompt.meta["seed"])
    return zlib.crc32(repr((prompt.token_ids, prompt.text, prompt.answer)).encode())


class TextArenaEnv:
    """One episode of a TextArena game of `players` players (one: a plain Environment; more: a
    multi-seat one, envs/environment.py)."""

    def __init__(self, game: str, config: TextArenaConfig, players: int = 1):
        self.name, self.config, self.players = game, config, players
        self.game: Any | None = None  # TextArena's env (untyped), from reset until it closes
        self.random_state: tuple | None = None  # the game's own: swapped in around each of its calls

    def reset(self, prompt: Prompt) -> Observation | SeatTurn:
        seed = episode_seed(prompt)
        with self._playing("reset"):
            self.game = make_game(self.name, self.config)
            self.game.reset(num_players=self.players, seed=seed)
            player, messages = self._new_messages()
            return messages if self.players == 1 else SeatTurn(player, messages)

    def step(self, turn: ModelTurn) -> EnvStep:
        with self._playing("step"):
            done, _ = self._open_game().step(action=turn.text)
            if not done:
                player, messages = self._new_messages()
                return EnvStep(observation=messages, seat=player if self.players > 1 else None)
            rewards, _ = self._close()
            if self.players == 1:
                return EnvStep(reward=self._player_reward(rewards, 0), done=True)
            return EnvStep(done=True, rewards={p: self._player_reward(rewards, p) for p in range(self.players)})

    def _player_reward(self, rewards: dict | None, player: int) -> float:
        """A player's reward from the game's `close()`: a finite number, or the episode drops."""
        reward = (rewards or {}).get(player)
        whose = "its player" if self.players == 1 else f"player {player}"
        if reward is None:
            raise EpisodeDropped("textarena_error", f"{self.name} ended without a reward for {whose}")
        if not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise EpisodeDropped(
                "textarena_error", f"{self.name} ended with reward {reward!r} for {whose}, not a number"
            )
        return float(reward)

    def close(self) -> None:
        """Closes a game still open: one cut by env.max_turns or a limit (it has no reward yet)."""
        if self.game is not None:
            with self._playing("close"):
                self._close()

    def _open_game(self) -> Any:
        """The game `reset` opened (inside `_playing`, a RuntimeError drops the episode)."""
        if self.game is None:
            raise RuntimeError("the game is not open: reset() first")
        return self.game

    def _close(self):
        game, self.game = self._open_game(), None
        return game.close()

    def _new_messages(self) -> tuple[int, str]:
        """The player whose turn it is, and the messages new to it since its last observation,
        without its own action's echo."""
        player, messages = self._open_game().get_observation()
        return player, "\n".join(text for sender, text, _ in messages if sender != player)

    @contextmanager
    def _playing(self, what: str) -> Iterator[None]:
        """The game's random state swapped in for the block; a game that raises drops the episode."""
        outer = random.getstate()
        if self.random_state is not None:
            random.setstate(self.random_state)
        try:
            yield
        except EpisodeDropped:
            raise
        except Exception as err:
            raise EpisodeDropped("textarena_error", f"{self.name} {what}() raised {type(err).__name__}: {err}") from err
        finally:
            self.random_state = random.getstate()
            random.setstate(outer)


@asynccontextmanager
async def textarena_environments(game: str, config: TextArenaConfig, players: int = 1) -> AsyncIterator[EnvFactory]:
    """The factory of `game`'s episodes of `players` players, checked first (a partial: it
    travels to env.procs)."""
    check_game(game, config, players)
    yield partial(TextArenaEnv, game, config, players)
