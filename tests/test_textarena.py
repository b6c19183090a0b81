"""TextArena games as environments (env.name=textarena:GAME) and the seeds task: real games,
played offline, and one short GRPO run on the preset's game."""

import asyncio
import pickle
import random
from functools import partial

import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.envs.environment import ModelTurn
from forge_async.envs.config import TextArenaConfig
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits
from forge_async.envs.textarena import TextArenaEnv, TextArenaError, check_game, textarena_environments
from forge_async.errors import ConfigError
from forge_async.models.tokenizer import build_byte_tokenizer
from forge_async.tasks.seeds import TRAIN_SEEDS_FROM, SeedsTask, seed_prompt
from forge_async.tasks.task import TaskError
from tests.support.app_config import app_config
from tests.support.app_runs import assert_accounting

pytestmark = pytest.mark.unit

GAME = "GuessTheNumber-v0"  # 1 to 20, 10 guesses; "[n]" is a guess
TOKENIZER = build_byte_tokenizer()


def turn(text: str, index: int = 0) -> ModelTurn:
    return ModelTurn(text, TOKENIZER.encode(text), "stop", index)


def new_game(seed: int = 3, **config) -> TextArenaEnv:
    env = TextArenaEnv(GAME, TextArenaConfig(**config))
    env.first = env.reset(seed_prompt(seed))
    return env


def secret(env: TextArenaEnv) -> int:
    return env.game.state.game_state["game_number"]


def test_a_game_is_played_to_its_end_and_rewarded_only_when_it_closes():
    env = new_game()
    assert "Guess The Number" in env.first and "[5]" in env.first  # the game's opening message, its format
    low, high, steps = 1, 20, []
    while not steps or not steps[-1].done:
        guess = (low + high) // 2
        steps.append(env.step(turn(f"[{guess}]", len(steps))))
        if "higher" in (steps[-1].observation or ""):
            low = guess + 1
        else:
            high = guess - 1
    assert len(steps) > 1 and all(s.reward == 0 and not s.done for s in steps[:-1])
    assert (steps[-1].reward, steps[-1].observation) == (1.0, None)  # won: TextArena's reward, at close
    assert env.game is None  # closed when it ended; closing again is a no-op
    env.close()


def test_observations_are_the_new_messages_only():
    env = new_game()
    second = env.step(turn("[10]")).observation
    third = env.step(turn("[15]" if "higher" in second else "[5]", 1)).observation
    assert second in ("The target number is higher.", "The target number is lower.")
    assert "Guess The Number" not in second and "[10]" not in second  # neither the first nor the model's turn
    assert second not in third and "[10]" not in third


def test_an_invalid_move_is_warned_once_then_ends_the_game_with_its_penalty():
    env = new_game()
    number = secret(env)
    guess = 10 if number != 10 else 11
    assert not env.step(turn(f"[{guess}]")).done
    warned = env.step(turn(f"I guess [{guess}] again", 1))  # the game's rule: already guessed
    assert not warned.done and "You attempted an invalid move" in warned.observation
    ended = env.step(turn("no guess", 2))
    # The game's penalty for a second invalid move in a row: its credit for the last guess.
    assert ended.done and ended.reward == pytest.approx(1 - abs(guess - number) / 19)


def test_bracket_actions_makes_a_bare_turn_the_game_s_action():
    env = new_game(bracket_actions=True)
    assert "invalid" not in env.step(turn("10")).observation
    plain = new_game()
    assert "invalid" in plain.step(turn("10")).observation  # as it is, "10" is no guess


def test_a_seed_deals_the_same_game_and_games_leave_the_global_random_alone():
    random.seed(123)
    state = random.getstate()
    a, b, other = new_game(seed=7), new_game(seed=7), new_game(seed=8)
    a.step(turn("[1]"))
    assert random.getstate() == state
    assert secret(a) == secret(b) and a.first == b.first
    assert [secret(new_game(seed=s)) for s in range(20)] != [secret(a)] * 20 and secret(other) in range(1, 21)


class ByteModel:
    """Says `turns[k]` (then EOS) as byte tokens in turn k."""

    def __init__(self, turns: list[str]):
        self.turns, self.calls = turns, 0

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        text = self.turns[self.calls]
        self.calls += 1
        ids = TOKENIZER.encode(text) + [TOKENIZER.eos_token_id]
        return Completion(prompt_ids, ids, [-0.5] * len(ids), [0] * len(ids), text, "stop")


def play(turns: list[str], max_turns: int) -> tuple[Completion, list[TextArenaEnv]]:
    made = []

    def factory() -> TextArenaEnv:
        made.append(TextArenaEnv(GAME, TextArenaConfig()))
        return made[-1]

    runner = EnvRunner(factory, TOKENIZER, SamplingConfig(max_tokens=8), EpisodeLimits(max_turns, 1024, 1024), 5.0)
    return asyncio.run(runner.play(seed_prompt(3), ByteModel(turns))), made


def test_the_runner_ends_with_the_game_and_closes_a_game_cut_by_max_turns():
    episode, (env,) = play(["x", "y", "z"], max_turns=8)  # two invalid moves: the game is over
    assert (episode.turns, episode.finish_reason, episode.env_reward) == (2, "done", 0.0)
    assert "Guess The Number" in TOKENIZER.decode(episode.prompt_ids) and "invalid move" in episode.text

    episode, (env,) = play(["[1]", "[2]", "[3]"], max_turns=2)
    assert (episode.turns, episode.finish_reason, episode.env_reward) == (2, "max_turns", 0.0)
    assert env.game is None  # closed by the runner, with no reward to give


def test_a_game_that_raises_drops_its_episode_as_textarena_error():
    env = new_game()
    with pytest.raises(EpisodeDropped, match="GuessTheNumber-v0 step") as dropped:
        env.step(ModelTurn(None, [], "stop", 0))  # not text: the game's regex raises
    assert dropped.value.reason == "textarena_error"


def test_a_game_that_fails_inside_textarena_mid_episode_is_dropped_as_textarena_error():
    # textarena 0.7.4's ThreeCardMonte-v0 passes set_invalid_move its reason as the reward: the
    # second invalid move in a row ends the game with text for a reward.
    env = TextArenaEnv("ThreeCardMonte-v0", TextArenaConfig())
    env.reset(seed_prompt(3))
    assert not env.step(turn("no move")).done  # warned
    with pytest.raises(
        EpisodeDropped, match=r"^ThreeCardMonte-v0 ended with reward 'Bad action.*' for its player, not a number"
    ) as dropped:
        env.step(turn("no move", 1))
    assert dropped.value.reason == "textarena_error"


def test_a_game_whose_step_raises_mid_episode_is_counted_as_textarena_error_by_the_runner(monkeypatch):
    from textarena.envs.GuessTheNumber.env import GuessTheNumberEnv
    from textarena.envs.registration import ENV_REGISTRY, EnvSpec

    class GuessOnceThenRaise(GuessTheNumberEnv):
        def step(self, action: str):
            if self.state.turn >= 1:
                raise KeyError("the game's own bug")
            return super().step(action)

    spec = EnvSpec("GuessOnceThenRaise-v0-raw", GuessOnceThenRaise, None, ENV_REGISTRY[GAME + "-raw"].kwargs)
    monkeypatch.setitem(ENV_REGISTRY, spec.id, spec)
    factory = partial(TextArenaEnv, "GuessOnceThenRaise-v0", TextArenaConfig())
    runner = EnvRunner(factory, TOKENIZER, SamplingConfig(max_tokens=8), EpisodeLimits(8, 1024, 1024), 5.0)
    model = ByteModel(["[1]", "[2]"])
    with pytest.raises(EpisodeDropped, match=r"^GuessOnceThenRaise-v0 step\(\) raised KeyError") as dropped:
        asyncio.run(runner.play(seed_prompt(3), model))
    assert dropped.value.reason == "textarena_error" and model.calls == 2  # its first move was played


@pytest.mark.parametrize("game", ["ThreeCardMonte-v0", "Countdown-v0"])
def test_a_game_broken_inside_textarena_is_named_at_start_by_playing_random_moves(game):
    with pytest.raises(
        TextArenaError,
        match=rf"^env.name=textarena:{game}: TextArena game {game} fails inside textarena 0.7.4 when played with "
        r"random moves \(seed 0, move \d+: .*\): .*; pick another game",
    ):
        check_game(game, TextArenaConfig())


@pytest.mark.e2e
def test_a_broken_game_stops_the_app_with_one_line_before_any_proc_starts(tmp_path):
    run = run_app(
        tmp_path / "run",
        "task.name=seeds",
        "env.name=textarena:ThreeCardMonte-v0",
        "model.tiny.tokenizer=bytes",
        timeout=120,
    )
    assert run.returncode == 2, run.output
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert (
        errors == [line for line in errors if "TextArena game ThreeCardMonte-v0 fails inside textarena" in line] != []
    )
    assert "Traceback" not in run.output and "spawning" not in run.output
    # Monarch's line saying where its internal logs are: in the run's logs, not on the console.
    assert (
        "Monarch" not in run.output and "Monarch internal logs" in (run.run_dir / "logs" / "controller.log").read_text()
    )


def test_games_that_cannot_be_played_here_fail_at_start_naming_them(monkeypatch):
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    config = TextArenaConfig()
    with pytest.raises(
        TextArenaError,
        match=r"^env.name=textarena:GuesTheNumber-v0: no such TextArena game; did you mean GuessTheNumber-v0",
    ):
        check_game("GuesTheNumber-v0", config)
    with pytest.raises(TextArenaError, match=r"TicTacToe-v0 cannot be played here: it is not a single-player game"):
        check_game("TicTacToe-v0", config)
    with pytest.raises(
        TextArenaError, match=r"QuantumTicTacToe-v0 cannot be played here: it is not a single-player game$"
    ):
        check_game("QuantumTicTacToe-v0", config)  # it accepts one player at reset
    with pytest.raises(TextArenaError, match=r"env.textarena.game_kwargs: .*'max_numbr'"):
        check_game(GAME, TextArenaConfig(game_kwargs={"max_numbr": 9}))
    with pytest.raises(
        TextArenaError, match=r"TwentyQuestions-v0 cannot be played here: it calls a hosted model and needs an API key"
    ):
        check_game("TwentyQuestions-v0", config)


def test_a_game_that_calls_a_hosted_model_is_refused_unless_online(monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "not-a-key")  # its constructor makes a client; nothing is sent
    with pytest.raises(
        TextArenaError,
        match=r"TwentyQuestions-v0 calls a hosted model \(gamemaster: OpenRouterAgent\): it is not offline",
    ):
        check_game("TwentyQuestions-v0", TextArenaConfig())


def test_games_fail_at_start_through_the_app_s_checks():
    # Through the app's start-up checks, before any proc starts.
    with pytest.raises(TextArenaError, match=r"^env.name=textarena:Nope-v0: no such TextArena game"):
        app_config("task.name=seeds", "env.name=textarena:Nope-v0").check_paths()


def test_a_game_needing_nltk_data_that_is_not_here_fails_naming_the_data():
    nltk = pytest.importorskip("nltk")
    try:
        nltk.data.find("corpora/words")
        pytest.skip("NLTK's words corpus is installed here")
    except LookupError:
        pass
    with pytest.raises(
        TextArenaError, match=r"^env.name=textarena:Wordle-v0 needs NLTK data that is not installed \(words\)"
    ):
        check_game("Wordle-v0", TextArenaConfig())


def test_the_factory_is_checked_first_and_travels_to_environment_procs():
    async def open_factory():
        async with textarena_environments(GAME, TextArenaConfig(bracket_actions=True)) as factory:
            return pickle.loads(pickle.dumps(factory))

    env = asyncio.run(open_factory())()
    assert "Guess The Number" in env.reset(seed_prompt(0)) and env.config.bracket_actions
    with pytest.raises(TextArenaError):
        asyncio.run(textarena_environments("Nope-v0", TextArenaConfig()).__aenter__())


def test_the_seeds_task_holds_out_seeds_training_never_deals():
    task = SeedsTask()
    held = task.hold_out(64)
    assert [p.meta["seed"] for p in held] == list(range(64)) and all(p.token_ids == [] for p in held)
    rng = random.Random(0)
    assert all(task.sample(rng).meta["seed"] >= TRAIN_SEEDS_FROM for _ in range(1000))
    with pytest.raises(TaskError, match="no completion to imitate"):
        task.demonstration(held[0])
    with pytest.raises(ConfigError, match="task.name=seeds hands out seeds, not prompts"):
        app_config("task.name=seeds")
    config = app_config(config_name="textarena")
    assert config.task.name == "seeds" and config.multi_turn and config.env.textarena.bracket_actions


@pytest.mark.e2e
def test_grpo_plays_the_preset_game_with_the_game_s_rewards(tmp_path):
    """One short run of configs/textarena.yaml, its games on a proc of their own (the factory pickled)."""
    run = run_app(tmp_path / "run", "--config-name=textarena", "steps=4", "env.procs=1", timeout=600)
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    metrics = run.metrics
    assert len(metrics) == 4
    rewards = [m["reward/mean"] for m in metrics]
    # Rewards from the game: some guesses score (partial credit, or a win), within [0, 1].
    assert all(0 <= r <= 1 for r in rewards) and max(rewards) > 0, rewards
    # Every game ended by its own rules (at most 4 guesses, each after one warned move): none cut.
    assert all(m["episodes/ended_max_turns"] == 0 for m in metrics)
    # Episodes are more than the model's turns: the game's replies (a warning alone is ~200 bytes).
    assert max(m["completion/length_mean"] + m.get("completion/env_tokens_mean", 0) for m in metrics) > 30
    assert all(m["samples/dropped_env_error"] == 0 for m in metrics)
    evaluations = run.evaluations
    assert [e["eval/prompts"] for e in evaluations] == [64, 64] and evaluations[-1]["eval/version"] == 4
