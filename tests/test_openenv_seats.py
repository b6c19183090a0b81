"""Multi-player games on OpenEnv servers (env.seats with env.name=openenv): the seat each
observation names, each seat's view of the game, each seat's reward from the session's state,
and drops by reason when a server names no seat or gives no rewards. Opt-in (FORGE_OPENENV_REPO):
OpenEnv's own textarena_env serving TicTacToe to two players, unmodified."""

import asyncio
import os

import pytest

from forge_async.envs.config import EnvConfig, OpenEnvConfig
from forge_async.envs.openenv import openenv_environments
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits
from forge_async.envs.seats import SeatRunner
from forge_async.generation.config import SamplingConfig
from forge_async.tasks.seeds import seed_prompt
from forge_async.tasks.task import Prompt
from tests.support.openenv_server import serve
from tests.support.scripted import BYTES, ScriptedText

pytestmark = pytest.mark.procs

RACE_TO_TEN = "tests.openenv_servers.race_to_ten:app"
OPENENV_REPO = os.environ.get("FORGE_OPENENV_REPO")


@pytest.fixture(scope="module")
def race_to_ten(tmp_path_factory):
    process = serve(RACE_TO_TEN, tmp_path_factory.mktemp("race_to_ten"))
    yield process
    process.stop()


def play(url: str, seats: list[str], moves: list[str], prompt: Prompt, context: int = 512, **openenv):
    """One game on the server at `url` with `seats`, every policy turn the next of `moves`,
    through openenv_environments and SeatRunner as a run plays it."""
    config = EnvConfig(name="openenv", seats=seats, max_turns=9, openenv=OpenEnvConfig(url=url, **openenv))

    async def game():
        async with openenv_environments(config, BYTES.eos_token_id, 1, None, BYTES, context) as sessions:
            limits = EpisodeLimits(9, context, context)
            runner = EnvRunner(sessions, BYTES, SamplingConfig(max_tokens=8), limits, timeout_s=30.0)
            return await SeatRunner(runner, seats).play(prompt, ScriptedText(moves))

    return asyncio.run(game())


def test_each_seat_plays_its_turns_and_gets_its_reward_from_the_state(race_to_ten):
    # 2 + 2 + 2 + 2 + 2: seat 0 brings the total to 10 on its third move
    seat0, seat1 = play(race_to_ten.url, ["policy", "policy"], ["[2]"] * 5, Prompt([], "", text="x"))
    assert (seat0.seat, seat1.seat) == (0, 1)
    assert (seat0.env_reward, seat1.env_reward) == (1.0, -1.0) and (seat0.turns, seat1.turns) == (3, 2)
    first = BYTES.decode(seat1.prompt_ids)
    assert "You are Player 1. The total is 2." in first and "Player 0" not in first

    against = play(race_to_ten.url, ["random", "policy"], ["[1]"] * 9, seed_prompt(1))
    assert len(against) == 1 and against[0].seat == 1 and against[0].env_reward in (1.0, -1.0)


def test_a_server_that_names_no_seat_or_gives_no_rewards_drops_the_game_by_reason(race_to_ten):
    with pytest.raises(EpisodeDropped, match="'player' .*seat_field.* is None") as dropped:
        play(race_to_ten.url, ["policy", "policy"], ["[2]"] * 5, Prompt([], "", text="x"), seat_field="player")
    assert dropped.value.reason == "openenv_error"
    with pytest.raises(EpisodeDropped, match="'raw_state.scores' .*seat_rewards.* None") as dropped:
        play(
            race_to_ten.url,
            ["policy", "policy"],
            ["[2]"] * 5,
            Prompt([], "", text="x"),
            seat_rewards="raw_state.scores",
        )
    assert dropped.value.reason == "openenv_error"
    with pytest.raises(EpisodeDropped, match="not one of the 3 seats"):
        play(
            race_to_ten.url, ["policy", "policy", "policy"], ["[2]"] * 9, Prompt([], "", text="x"), seat_field="reward"
        )


@pytest.mark.skipif(OPENENV_REPO is None, reason="FORGE_OPENENV_REPO: an OpenEnv checkout's envs/ directory")
def test_openenv_textarena_env_unmodified_two_players_tictactoe(tmp_path, monkeypatch):
    """OpenEnv's textarena_env as it ships, serving TicTacToe-v0 to two players: each seat sees
    its own game (its first observation says which player it is), and the rewards are the game's."""
    monkeypatch.setenv("PYTHONPATH", f"{OPENENV_REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("TEXTARENA_ENV_ID", "TicTacToe-v0")
    monkeypatch.setenv("TEXTARENA_NUM_PLAYERS", "2")
    monkeypatch.setenv("TEXTARENA_DOWNLOAD_NLTK", "0")
    server = serve("textarena_env.server.app:app", tmp_path)
    try:
        # seat 0 takes the top row while seat 1 plays the middle row
        seat0, seat1 = play(server.url, ["policy", "policy"], ["[0]", "[3]", "[1]", "[4]", "[2]"], seed_prompt(3), 4096)
        against = [
            play(server.url, ["policy", "random"], ["[4]", "[0]", "[8]", "[2]", "[6]"], seed_prompt(s), 4096)
            for s in range(3)
        ]
    finally:
        server.stop()
    assert (seat0.env_reward, seat1.env_reward) == (1.0, -1.0) and (seat0.turns, seat1.turns) == (3, 2)
    assert "You are Player 0" in BYTES.decode(seat0.prompt_ids) and "You are Player 1" in BYTES.decode(seat1.prompt_ids)
    assert "You are Player 0" not in BYTES.decode(seat1.prompt_ids + seat1.token_ids)
    assert all(len(g) == 1 and g[0].seat == 0 and g[0].env_reward in (-1.0, 0.0, 1.0) for g in against)
