"""Several players in one episode (envs/seats.py): each policy seat's own transcript and reward,
scripted and random seats never trained on, per-policy-seat limits, drops by reason, the
rollouts' grouping by seat, and a real two-player TextArena game played through it."""

import asyncio

import pytest

from forge_async.config.callables import CallableError
from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.controller.config import GRPOConfig
from forge_async.envs.config import EnvConfig, TextArenaConfig
from forge_async.evaluation.config import EvalConfig
from forge_async.envs.environment import EnvStep, ModelTurn
from forge_async.envs.runner import EpisodeDropped
from forge_async.envs.seats import check_seats, random_move
from forge_async.envs.textarena import TextArenaEnv, TextArenaError, check_game
from forge_async.errors import ConfigError
from forge_async.observability.metrics import seat_metrics
from forge_async.rollout.multi_turn import advantage_groups, by_seat
from forge_async.tasks.seeds import seed_prompt
from tests.support.scripted import BYTES
from tests.support.seat_games import Moves, Relay, play, seat_runner

pytestmark = pytest.mark.unit


def test_self_play_gives_each_policy_seat_its_own_transcript_and_reward():
    model = Moves(["a", "b", "w", "d"])
    seat0, seat1 = play(seat_runner(Relay, ["policy", "policy"]), model)
    eos = BYTES.eos_token_id
    assert (seat0.seat, seat1.seat) == (0, 1) and (seat0.env_reward, seat1.env_reward) == (1.0, -1.0)
    assert (seat0.turns, seat1.turns) == (2, 2)
    said = BYTES.decode([t for t, m in zip(seat0.token_ids, seat0.model_mask) if m and t != eos])
    assert said == "aw"  # its own moves only
    # between its turns, the seat sees the other seat's move as an observation, never trained on
    env = [t for t, v in zip(seat0.token_ids, seat0.versions) if v == ENV_TOKEN]
    assert "[b]" in BYTES.decode(env) and all(v == 2 for v, m in zip(seat0.versions, seat0.model_mask) if m)
    assert model.prompts[2] == seat0.prompt_ids + seat0.token_ids[: len(model.prompts[2]) - len(seat0.prompt_ids)]


def test_a_scripted_seat_plays_and_gives_no_completion():
    calls = []

    def player(observations: list[str], seat: int) -> str:
        calls.append((observations, seat))
        return "s"

    (seat0,) = play(seat_runner(Relay, ["policy", player_spec(player)]), Moves(["w", "w"]))
    assert seat0.seat == 0 and seat0.env_reward == 1.0 and seat0.turns == 2
    assert calls == [(["[w]"], 1), (["[w]", "[w]"], 1)]  # what its seat has seen so far


def player_spec(fn) -> str:
    """`fn` as a module:function spec (this module's global, set for the test)."""
    globals()["_scripted"] = fn
    return f"{__name__}:_scripted"


def test_a_scripted_player_that_raises_or_says_nothing_drops_its_episode_by_reason():
    def broken(observations: list[str], seat: int) -> str:
        raise RuntimeError("no idea")

    with pytest.raises(EpisodeDropped) as dropped:
        play(seat_runner(Relay, ["policy", player_spec(broken)]), Moves(["a"]))
    assert dropped.value.reason == "scripted_player_error" and "no idea" in str(dropped.value)

    with pytest.raises(EpisodeDropped) as silent:
        play(seat_runner(Relay, ["policy", player_spec(lambda observations, seat: "")]), Moves(["a"]))
    assert silent.value.reason == "scripted_player_error"


def test_limits_are_per_policy_seat_and_end_the_game_unrewarded():
    (seat0,) = play(seat_runner(lambda: Relay(moves=10), ["policy", "random"], max_turns=2), Moves(["a", "b"]))
    assert (seat0.turns, seat0.finish_reason, seat0.env_reward) == (2, "max_turns", 0.0)


def test_an_environment_that_names_no_seat_drops_its_episode():
    class Lost(Relay):
        def step(self, turn: ModelTurn) -> EnvStep:
            return EnvStep(observation="?", seat=5)

    with pytest.raises(EpisodeDropped) as dropped:
        play(seat_runner(Lost, ["policy", "policy"]), Moves(["a"]))
    assert dropped.value.reason == "env_error" and "2 seats" in str(dropped.value)


def test_bad_seat_plans_fail_at_start_naming_the_key():
    with pytest.raises(ConfigError, match="no seat is the policy"):
        check_seats(["random", "random"])
    with pytest.raises(ConfigError, match=r"env.seats\[1\]='bogus'"):
        check_seats(["policy", "bogus"])
    with pytest.raises(CallableError, match=r"env.seats\[1\] 'no_such_module:f' cannot be imported"):
        check_seats(["policy", "no_such_module:f"])
    with pytest.raises(ConfigError, match="name two or more"):
        EnvConfig(name="x:y", seats=["policy"])
    with pytest.raises(ConfigError, match="set env.name"):
        EnvConfig(seats=["policy", "random"])
    with pytest.raises(ConfigError, match="names the seats of a multi-player game"):
        GRPOConfig(eval=EvalConfig(seats=["policy", "random"]))
    two = EnvConfig(name="x:y", seats=["policy", "policy"])
    with pytest.raises(ConfigError, match=r"of 2 seats \(env.seats=\['policy', 'policy'\]\); name as many"):
        GRPOConfig(env=two, eval=EvalConfig(seats=["policy", "random", "random"]))
    with pytest.raises(ConfigError, match=r"eval.seats=\['random', 'random'\]: no seat is the policy"):
        check_seats(["random", "random"], "eval.seats")
    with pytest.raises(TextArenaError, match="not a game of 3 players"):
        check_game("TicTacToe-v0", TextArenaConfig(), players=3)
    with pytest.raises(TextArenaError, match="not a single-player game"):
        check_game("TicTacToe-v0", TextArenaConfig(), players=1)


def test_random_moves_are_those_the_observations_show():
    import random

    rng = random.Random(0)
    assert {random_move(["Available Moves: '[0]', '[4]'"], rng) for _ in range(20)} == {"[0]", "[4]"}
    assert random_move(["[bet] or [check]", "no moves here"], rng) in {"[bet]", "[check]"}


def test_a_real_two_player_textarena_game_through_self_play_and_against_random():
    """TicTacToe-v0 as TextArena ships it: both seats the policy (its moves scripted here), then
    the policy against the random seat; rewards are the game's, each seat's its own."""
    config = TextArenaConfig(bracket_actions=True)
    check_game("TicTacToe-v0", config, players=2)
    new_game = lambda: TextArenaEnv("TicTacToe-v0", config, players=2)  # noqa: E731
    runner = seat_runner(new_game, ["policy", "policy"], max_turns=9, context=2048)
    # seat 0 takes the top row while seat 1 plays the middle row
    seat0, seat1 = asyncio.run(runner.play(seed_prompt(3), Moves(["0", "3", "1", "4", "2"])))
    assert (seat0.env_reward, seat1.env_reward) == (1.0, -1.0) and (seat0.turns, seat1.turns) == (3, 2)
    assert "Tic Tac Toe" in BYTES.decode(seat0.prompt_ids) and "Player 1" in BYTES.decode(seat1.prompt_ids)

    against = seat_runner(new_game, ["policy", "random"], max_turns=9, context=2048)
    games = [asyncio.run(against.play(seed_prompt(s), Moves(["4", "0", "8", "2", "6"] * 2))) for s in range(4)]
    assert all(len(g) == 1 and g[0].seat == 0 and g[0].env_reward in (-1.0, 0.0, 1.0) for g in games)


def test_rollouts_group_by_seat_and_metrics_report_each_seat():
    def completion(seat: int, reward: float) -> Completion:
        return Completion([1], [2], [0.0], [0], "", "done", env_reward=reward, seat=seat)

    group = [completion(0, 1.0), completion(1, -1.0), completion(0, -1.0), completion(1, 1.0), completion(0, 1.0)]
    assert [[c.seat for c in g] for g in by_seat(group)] == [[0, 0, 0], [1, 1]]
    assert advantage_groups(group, "seat") == by_seat(group)
    assert advantage_groups(group, "game") == [group] and advantage_groups([], "game") == []
    with pytest.raises(ConfigError, match="env.seat_baseline='both': one of seat, game"):
        EnvConfig(name="nim", seats=["policy", "policy"], seat_baseline="both")
    figures = seat_metrics([Episode(c, c.env_reward, 0.0) for c in group])
    assert figures == pytest.approx(
        {"reward/seat_0": 1 / 3, "seat_0/won_frac": 2 / 3, "reward/seat_1": 0.0, "seat_1/won_frac": 0.5}
    )
    assert seat_metrics([Episode(Completion([1], [2], [0.0], [0], "", "stop"), 1.0, 0.0)]) == {}


@pytest.mark.e2e
def test_grpo_self_plays_a_two_player_textarena_game_and_accounts_per_seat(tmp_path):
    """A short run of TicTacToe-v0 with both seats the policy, its games on a proc of their own
    (the multi-seat environment's calls cross procs): the accounting adds up counting each seat's
    completion as a sample, and each step reports its seats. (The untrained model's first
    move is mostly invalid, which ends a game before seat 1 moves: seat 1 trains only sometimes.)"""
    from tests.support.app_runs import assert_accounting
    from forge_async.cli.subprocess_run import run_app

    run = run_app(
        tmp_path / "run",
        "task.name=seeds",
        "model.tiny.tokenizer=bytes",
        "model.tiny.max_seq_len=1024",
        "env.name=textarena:TicTacToe-v0",
        "env.seats=[policy,policy]",
        "env.textarena.bracket_actions=true",
        "sampling.max_tokens=1",
        "env.max_turns=5",
        "env.procs=1",
        "steps=3",
        "prompts_per_step=4",
        "group_size=4",
        "prompts_per_rollout=4",
        "eval.seats=[policy,random]",
        "eval.every_steps=3",
        "eval.prompts=8",
        timeout=600,
    )
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    assert all(-1 <= m["reward/seat_0"] <= 1 and 0 <= m["seat_0/won_frac"] <= 1 for m in run.metrics)
    seats = {key for m in run.metrics for key in m if key.startswith("reward/seat_")}
    assert seats <= {"reward/seat_0", "reward/seat_1"}
    assert all(m["samples/trained"] == 16 * (i + 1) for i, m in enumerate(run.metrics))
    # evaluations play against the random seat: the policy's seat 0 only, and how often it won
    assert [e["eval/version"] for e in run.evaluations] == [0, 3]
    assert all(0 <= e["eval/won_frac"] <= 1 for e in run.evaluations)


def test_the_tictactoe_player_wins_blocks_and_beats_a_poor_player_at_the_real_game():
    from forge_async.envs.players import tictactoe

    def seen(board: str, mark: str = "X") -> list[str]:
        rows = [board[i : i + 3] for i in (0, 3, 6)]
        rendered = "\n---+---+---\n".join(" " + " | ".join(row) + " " for row in rows)
        return [
            f"As Player 1, you will be '{mark}', while your opponent is 'O'.",
            f"Current Board:\n\n{rendered}\n\nAvailable Moves: ...",
        ]

    assert tictactoe(seen("XX2O4O678"), 1) == "[2]"  # completes its own line
    assert tictactoe(seen("OO23X5678"), 1) == "[2]"  # blocks the opponent's
    assert tictactoe(seen("012345678"), 1) == "[4]"  # the centre first
    assert tictactoe(seen("0123O5678"), 1) == "[0]"  # then a corner

    config = TextArenaConfig(bracket_actions=True)
    new_game = lambda: TextArenaEnv("TicTacToe-v0", config, players=2)  # noqa: E731
    runner = seat_runner(new_game, ["policy", "forge_async.envs.players:tictactoe"], max_turns=9, context=2048)
    # the policy plays the sides only: the heuristic takes the centre and completes a diagonal or blocks
    games = [asyncio.run(runner.play(seed_prompt(s), Moves(["1", "3", "5", "7", "0"]))) for s in range(2)]
    assert all(g[0].env_reward == -1.0 for g in games)


def test_the_selfplay_preset_plays_tictactoe_against_itself_and_evaluates_against_random():
    from tests.support.app_config import app_config

    config = app_config(config_name="selfplay")
    assert config.env.seats == ["policy", "policy"] and config.eval.seats == ["policy", "random"]
    config.check_paths()  # the game checked for two players, here, before any proc
    with pytest.raises(TextArenaError, match="not a game of 3 players"):
        app_config("env.seats=[policy,policy,policy]", "eval.seats=[]", config_name="selfplay").check_paths()


def test_an_environment_that_only_asks_its_scripted_seat_still_ends():
    class Stuck(Relay):
        def step(self, turn: ModelTurn) -> EnvStep:
            return EnvStep(observation="again", seat=1)  # the random seat, forever

    (seat0,) = play(seat_runner(Stuck, ["policy", "random"], max_turns=3), Moves(["a"]))
    assert (seat0.turns, seat0.finish_reason, seat0.env_reward) == (1, "max_turns", 0.0)


def test_rewards_that_are_not_finite_numbers_drop_the_episode():
    class Infinite(Relay):
        def step(self, turn: ModelTurn) -> EnvStep:
            return EnvStep(done=True, rewards={0: float("inf"), 1: 0.0})

    with pytest.raises(EpisodeDropped, match="not numbers") as dropped:
        play(seat_runner(Infinite, ["policy", "policy"]), Moves(["a"]))
    assert dropped.value.reason == "env_error"
