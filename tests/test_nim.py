"""env.name=nim (envs/games/nim.py): the rules, each seat's reward, the moves a random seat picks
from, the perfect player and the optimum against random, the seat plan checked at start, and a
short self-play run through apps.grpo whose accounting adds up per seat."""

import asyncio

import pytest

from forge_async.data.episode import Completion
from forge_async.envs.environment import EnvStep, ModelTurn, SeatTurn
from forge_async.envs.games.nim import MAX_PILE, MIN_PILE, Nim, best_win_rate, deal, legal_moves, perfect
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.envs.seats import SeatRunner
from forge_async.errors import ConfigError
from forge_async.generation.config import SamplingConfig
from forge_async.tasks.seeds import seed_prompt
from tests.support.digits import TOKENIZER

pytestmark = pytest.mark.unit


def move(text: str) -> ModelTurn:
    return ModelTurn(text, [], "stop", 0)


def game_at(pile: int, seat: int = 0) -> Nim:
    game = Nim()
    game.pile, game.seat = pile, seat
    return game


def test_a_seed_deals_a_pile_and_who_moves_first_and_each_turn_lists_its_moves():
    deals = {deal(seed) for seed in range(200)}
    assert {pile for pile, _ in deals} == set(range(MIN_PILE, MAX_PILE + 1)) and {s for _, s in deals} == {0, 1}
    turn = Nim().reset(seed_prompt(7))
    assert turn == SeatTurn(deal(7)[1], str(deal(7)[0]), ["1", "2", "3"])
    assert legal_moves(2) == ["1", "2"] and legal_moves(1) == ["1"]


def test_taking_passes_the_turn_and_taking_the_last_object_wins():
    game = game_at(6, seat=1)
    assert game.step(move("2")) == EnvStep(observation="4", seat=0, moves=["1", "2", "3"])
    assert game.step(move("3")) == EnvStep(observation="1", seat=1, moves=["1"])
    assert game.step(move("1")) == EnvStep(done=True, rewards={1: 1.0, 0: -1.0})


@pytest.mark.parametrize("said", ["4", "0", "", "12", "x"])
def test_any_other_turn_loses_the_game_for_the_seat_that_said_it(said):
    assert game_at(5, seat=0).step(move(said)) == EnvStep(done=True, rewards={0: -1.0, 1: 1.0})
    assert game_at(2, seat=1).step(move("3")).rewards == {1: -1.0, 0: 1.0}  # more than are left


def test_the_perfect_player_leaves_a_multiple_of_four_and_takes_one_when_it_cannot():
    assert [perfect(["15", str(pile)], 0) for pile in (5, 6, 7, 8, 9)] == ["1", "2", "3", "1", "1"]


def seeds_dealing(pile: int, first: int) -> list[int]:
    return [seed for seed in range(2000) if deal(seed) == (pile, first)]


def test_the_optimum_against_random_is_the_best_reply_to_each_of_its_takes():
    assert best_win_rate([s for s in range(200) if deal(s)[0] % 4 and deal(s)[1] == 0]) == 1.0
    # the random seat at 5 leaves 4 (the best player, taking 1, then wins unless it takes 3: 2/3), 3 or 2
    assert best_win_rate(seeds_dealing(5, first=1)) == pytest.approx((2 / 3 + 1 + 1) / 3)
    # at 8 every take leaves the random seat 5-7, one take of which leaves 4 again
    assert best_win_rate(seeds_dealing(8, first=0)) == pytest.approx(8 / 9)
    assert best_win_rate(seeds_dealing(8, first=1), seat=1) == pytest.approx(8 / 9)
    assert 0.9 < best_win_rate(list(range(128))) < 1.0


class Perfect:
    """The policy, playing `perfect` on the pile its transcript shows last: `<bos>11<sep>`, then
    its move and the pile it faces next, `3 7<sep>`."""

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        sep = TOKENIZER.convert_tokens_to_ids("<sep>")
        seen = prompt_ids[:-1]
        last = max((i for i, token in enumerate(seen) if token == sep), default=None)
        pile = seen[1:] if last is None else seen[last + 2 :]
        said = perfect(["".join(map(str, pile))], 0)
        return Completion(prompt_ids, [int(said)], [-0.1], [1], said, "length")


class Refereed(Nim):
    """Nim that records every turn with the moves its seat was offered."""

    turns: list[tuple[int, str, list[str]]] = []

    def step(self, turn: ModelTurn) -> EnvStep:
        Refereed.turns.append((self.seat, turn.text, legal_moves(self.pile)))
        return super().step(turn)


def test_the_random_seat_picks_among_the_listed_moves_and_the_perfect_player_beats_it():
    limits = EpisodeLimits(max_turns=8, max_episode_tokens=60, context=64)
    runner = SeatRunner(EnvRunner(Refereed, TOKENIZER, SamplingConfig(max_tokens=1), limits, 5.0), ["policy", "random"])
    games = [asyncio.run(runner.play(seed_prompt(seed), Perfect())) for seed in range(64)]
    random_turns = [(said, moves) for seat, said, moves in Refereed.turns if seat == 1]
    assert random_turns and all(said in moves for said, moves in random_turns)
    assert len({said for said, _ in random_turns}) == 3  # it does pick among them
    assert all(len(g) == 1 and g[0].seat == 0 and g[0].env_reward in (1.0, -1.0) for g in games)
    won = [game[0].env_reward == 1.0 for game in games]
    deals = [deal(seed) for seed in range(64)]
    assert all(w for w, (pile, first) in zip(won, deals) if first == 0 and pile % 4)
    assert sum(won) / len(won) > 0.8


def test_a_seat_plan_of_another_size_fails_at_start_naming_the_key():
    from tests.support.app_config import app_config

    config = app_config(config_name="selfplay_nim")
    assert (config.env.name, config.env.seats, config.eval.seats) == ("nim", ["policy", "policy"], ["policy", "random"])
    config.check_paths()
    with pytest.raises(ConfigError, match=r"env.name=nim is a game of 2 players: env.seats must name 2 seats"):
        app_config("env.seats=[policy,policy,random]", "eval.seats=[]", config_name="selfplay_nim").check_paths()
    with pytest.raises(ConfigError, match=r"env.seats must name 2 seats.*got \[\]"):
        app_config("env.seats=[]", "eval.seats=[]", config_name="selfplay_nim").check_paths()


@pytest.mark.e2e
def test_grpo_self_plays_nim_and_each_seat_accounts_for_its_own_games(tmp_path):
    """A short run of the selfplay_nim preset (both seats the policy, real vLLM and Monarch): the
    accounting adds up counting a sample per seat, every game ends with a winner (each seat's
    reward +1 or -1, so its mean reward is 2 x its won share - 1), and evaluations play the
    random seat."""
    from forge_async.cli.subprocess_run import run_app
    from tests.support.app_runs import assert_accounting

    run = run_app(
        tmp_path / "run",
        "--config-name=selfplay_nim",
        "steps=3",
        "prompts_per_step=4",
        "group_size=4",
        "prompts_per_rollout=4",
        "eval.every_steps=3",
        "eval.prompts=8",
        timeout=600,
    )
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    # A sync step trains on everything it generated: a batch (16) or a little more where a seat that
    # never moved left a refill, every sample on the version that made it.
    trained = [m["samples/trained"] for m in run.metrics]
    assert all(16 <= step < 16 + 8 for step in (b - a for a, b in zip([0, *trained], trained))), trained
    assert run.summary["trained"] == run.summary["generated"] and run.summary["dropped_stale"] == 0
    for m in run.metrics:
        assert m["episodes/ended_max_turns"] == 0
        for seat in (0, 1):
            if f"reward/seat_{seat}" in m:
                assert m[f"reward/seat_{seat}"] == pytest.approx(2 * m[f"seat_{seat}/won_frac"] - 1)
    assert {key for m in run.metrics for key in m if key.startswith("reward/seat_")} == {
        "reward/seat_0",
        "reward/seat_1",
    }
    assert [e["eval/version"] for e in run.evaluations] == [0, 3]
    assert all(e["eval/prompts"] == 8 and 0 <= e["eval/won_frac"] <= 1 for e in run.evaluations)
