"""Multi-turn episodes: the runner's token bookkeeping, environment tokens out of the loss, and
tool_lookup learning in a run whose environment sometimes fails."""

import asyncio
import statistics

import numpy as np
import pytest
import torch

from forge_async.cli.subprocess_run import run_app, run_app_acting_at
from forge_async.generation.config import SamplingConfig
from forge_async.data.batch import pack_episodes
from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.tasks.task import Prompt
from forge_async.envs.environment import EnvStep, ModelTurn
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits
from forge_async.losses.config import ImportanceConfig
from forge_async.losses.grpo import importance_weights, policy_gradient_loss, response_logprobs
from forge_async.models.tokenizer import BOS, SEP, VOCAB
from forge_async.models.titan import build_titan_model
from tests.support.app_runs import assert_accounting, assert_finished_dropping, kill_role
from tests.support.digits import EOS_ID, PAD_ID, TOKENIZER
from tests.support.scripted import ScriptedModel

pytestmark = pytest.mark.unit

BOS_ID, SEP_ID = VOCAB.index(BOS), VOCAB.index(SEP)


class Echo:
    """Replies to each turn with its text reversed; done after `turns` turns."""

    def __init__(self, turns: int = 2, reward: float = 0.25):
        self.turns, self.reward = turns, reward

    def reset(self, prompt: Prompt) -> str:
        return prompt.text

    def step(self, turn: ModelTurn) -> EnvStep:
        return EnvStep(observation=turn.text[::-1], reward=self.reward, done=turn.index + 1 == self.turns)


def runner(env_factory, max_turns=4, max_episode_tokens=64, context=64, timeout_s=5.0) -> EnvRunner:
    limits = EpisodeLimits(max_turns, max_episode_tokens, context)
    return EnvRunner(env_factory, TOKENIZER, SamplingConfig(max_tokens=4), limits, timeout_s)


def play(env_factory, model: ScriptedModel, **limits) -> Completion:
    return asyncio.run(runner(env_factory, **limits).play(Prompt([], "", text="5"), model))


def test_turns_and_observations_interleave_with_versions_logprobs_and_templating():
    model = ScriptedModel(["12", "3"], versions=[3, 4])
    c = play(Echo, model)
    assert c.prompt_ids == [BOS_ID, 5, SEP_ID]  # reset's text, as a user message
    #                       turn 1 (v3)   observation "21" + <sep> (chat template)   turn 2 (v4)
    assert c.token_ids == [1, 2, EOS_ID, 2, 1, SEP_ID, 3, EOS_ID]
    assert c.versions == [3, 3, 3, ENV_TOKEN, ENV_TOKEN, ENV_TOKEN, 4, 4]
    assert c.logprobs == [-0.5] * 3 + [0.0] * 3 + [-0.5] * 2
    assert c.model_mask == [True] * 3 + [False] * 3 + [True] * 2
    assert model.prompts[1] == c.prompt_ids + c.token_ids[:6]  # turn 2 saw the whole episode so far
    assert (c.turns, c.env_reward, c.finish_reason) == (2, 0.5, "done")
    assert (c.oldest_version, c.version_spread) == (3, 1)  # environment tokens have no version
    assert Episode(c, 0.5, 1.0).policy_age(6) == 3


class RoutedModel(ScriptedModel):
    """A ScriptedModel of an MoE model: turn k routes every token it was fed to expert k."""

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        completion = await super().__call__(prompt_ids, sampling)
        fed = len(prompt_ids) + len(completion.token_ids) - 1
        completion.routes = np.full((fed, 2, 1), len(self.prompts) - 1, dtype=np.uint8)
        return completion


def test_an_episode_carries_the_routes_of_its_last_turn_over_every_token_fed():
    c = play(Echo, RoutedModel(["12", "3"], versions=[3, 4]))
    assert c.routes.shape == (len(c.prompt_ids) + len(c.token_ids) - 1, 2, 1)
    assert (c.routes == 1).all()  # turn 2 was fed the whole episode: its computation is the one kept


def test_limits_end_episodes_and_say_which():
    c = play(lambda: Echo(turns=10), ScriptedModel(["1"] * 10, [0] * 10), max_turns=3)
    assert (c.turns, c.finish_reason) == (3, "max_turns")
    assert c.token_ids[-1] == EOS_ID  # the last turn's observation is not added

    model = ScriptedModel(["123", "4567", "8"], [0, 0, 0])
    c = play(lambda: Echo(turns=10), model, max_episode_tokens=9)
    # turn 1: 4 tokens, observation 4 -> 8 used; turn 2 may take 1 (of sampling.max_tokens=4)
    assert model.budgets == [4, 1]
    assert c.finish_reason == "max_episode_tokens" and len(c.token_ids) == 9


class Raises(Echo):
    def step(self, turn):
        raise KeyError("no such tool")


class Hangs(Echo):
    async def step(self, turn):
        await asyncio.sleep(3600)


class BadReward(Echo):
    def step(self, turn):
        return EnvStep(reward=float("nan"), done=True)


@pytest.mark.parametrize(
    "env, reason, says",
    [
        (Raises, "env_error", "step() raised KeyError"),
        (Hangs, "env_timeout", "env.timeout_s=0.2"),
        (BadReward, "env_error", "not a finite number"),
    ],
)
def test_a_failing_environment_drops_the_episode_with_a_reason(env, reason, says):
    with pytest.raises(EpisodeDropped, match=says.replace("(", r"\(").replace(")", r"\)")) as dropped:
        play(env, ScriptedModel(["1"], [0]), timeout_s=0.2)
    assert dropped.value.reason == reason


def test_environment_tokens_get_no_gradient(tiny_checkpoint):
    """The environment tokens' recorded logprobs and advantages move no gradient (their terms are not
    in the loss); changing a model token does."""
    torch.manual_seed(0)
    model = build_titan_model(tiny_checkpoint.shape)

    def gradient(token_ids, logprobs, token_advantages) -> torch.Tensor:
        versions = [0, 0, ENV_TOKEN, ENV_TOKEN, 1, 1]
        c = Completion([BOS_ID, 4, SEP_ID], token_ids, logprobs, versions, "", "done", turns=2)
        batch = pack_episodes([Episode(c, 1.0, 1.0, token_advantages=token_advantages)], PAD_ID)
        assert batch.response_mask[0].tolist() == [1, 1, 0, 0, 1, 1]
        model.zero_grad()
        logprobs_now = response_logprobs(model, batch)[0]
        weights, _ = importance_weights(logprobs_now, batch, ImportanceConfig())  # truncated IS, as trained
        policy_gradient_loss(logprobs_now, batch, 1 / batch.num_response_tokens, weights).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    base = gradient([4, EOS_ID, 7, SEP_ID, 7, EOS_ID], [-1.0, -1.0, 0.0, 0.0, -1.0, -1.0], [0.0] * 6)
    env_changed = gradient(
        [4, EOS_ID, 7, SEP_ID, 7, EOS_ID], [-1.0, -1.0, -9.0, -9.0, -1.0, -1.0], [0.0, 0.0, 5.0, 5.0, 0.0, 0.0]
    )
    assert torch.equal(base, env_changed)
    model_changed = gradient([4, EOS_ID, 7, SEP_ID, 3, EOS_ID], [-1.0, -1.0, 0.0, 0.0, -1.0, -1.0], [0.0] * 6)
    assert not torch.allclose(base, model_changed)


@pytest.mark.e2e
def test_tool_lookup_learns_through_a_flaky_environment(tmp_path):
    steps = 60
    run = run_app(
        tmp_path / "run",
        "--config-name=tool_lookup",
        f"steps={steps}",
        "env.name=tests.flaky_environment:FlakyLookupEnv",
        "env.timeout_s=0.5",
        timeout=900,
    )
    dropped = assert_finished_dropping(run, "env_error", "env_timeout")
    metrics = run.metrics
    # The last step's row counts the drops so far; episodes still in flight then may drop after it.
    assert 0 < metrics[-1]["samples/dropped_env_error"] <= dropped["env_error"]
    # From chance (~0.01) to well beyond it: the call format and key are learned by step 60.
    first, last = (statistics.fmean(m["reward/mean"] for m in part) for part in (metrics[:10], metrics[-10:]))
    assert first < 0.06 and last > first + 0.08, (first, last)
    # Turns of one episode are sampled under different versions (async, weights swapped between them).
    assert max(m["policy/version_spread_max"] for m in metrics) >= 1
    assert all(m["policy/age_max"] <= 1 for m in metrics)  # age counts model tokens only
    assert all(m["rollout/straggler_wait_ms"] >= 0 for m in metrics if "rollout/straggler_wait_ms" in m)
    # The hung calls (key 8) keep their groups waiting about env.timeout_s (from the group's first episode
    # to end, which may have run a little after the hung call started).
    assert max(m.get("rollout/straggler_wait_max_ms", 0) for m in metrics) >= 450
    # Evaluated as episodes too (v0, ~v25, ~v50, v60), each pinned across its turns' calls; the
    # environment's failures drop evaluation episodes as well (counted).
    versions = [e["eval/version"] for e in run.evaluations]
    assert versions[0] == 0 and versions[-1] == steps and versions == sorted(set(versions)), versions
    assert sum(e["eval/dropped"] for e in run.evaluations) > 0


def test_the_documented_custom_environment_plays_as_described():
    from docs.examples.custom_environment import HigherLower

    prompt = Prompt([BOS_ID, 2, 7, 1, SEP_ID], answer="7", text="271")
    model = ScriptedModel(["2", "9", "7"], versions=[0, 0, 1])
    c = asyncio.run(runner(HigherLower).play(prompt, model))
    # 2: higher ("1"), 9: lower ("0"), 7: right on the third try
    assert c.token_ids == [2, EOS_ID, 1, SEP_ID, 9, EOS_ID, 0, SEP_ID, 7, EOS_ID]
    assert (c.turns, c.env_reward, c.finish_reason) == (3, pytest.approx(1 / 3), "done")


@pytest.mark.e2e
def test_environments_on_a_proc_of_their_own_drop_by_reason_and_a_killed_one_ends_the_run(tmp_path):
    run_dir = tmp_path / "run"
    run = run_app_acting_at(
        run_dir,
        {4: kill_role(run_dir, "environment0")},
        "--config-name=tool_lookup",
        "steps=30",
        "env.procs=1",
        "env.name=tests.flaky_environment:FlakyLookupEnv",
        "env.timeout_s=0.5",
    )
    pid = run.procs["environment0"]["pid"]
    # Errors raised on the environment's proc come back as the environment's, counted by reason.
    dropped = run.metrics[2]
    assert dropped["samples/dropped_env_error"] > 0 and dropped["samples/dropped_env_timeout"] > 0, dropped
    assert "reset() raised RuntimeError: no table for key 7" in run.output
    # Its death ends the run within a minute, naming the proc; what was learned is saved.
    assert run.returncode == 1, run.output
    assert run.ended_at - run.acted_at[4] < 60
    assert f"environment proc (pid {pid} on" in run.output and "Traceback" not in run.output
    summary = run.summary
    assert summary["failure"].startswith("environment proc") and summary["steps"] < 30
    assert_accounting(summary)
    assert (run_dir / "final_model" / "config.json").is_file()


@pytest.mark.procs
def test_a_multi_turn_step_counts_the_model_s_tokens_in_every_per_token_figure(tiny_checkpoint):
    """The trainer's loss, entropy, importance statistics and token count on a multi-turn episode
    (environment tokens between the turns) against the same figures computed here over the model's
    tokens alone, from the same weights."""
    from forge_async.handles import meshes
    from forge_async.models.titan import load_frozen_model
    from tests.support.meshes import spawn_trainer

    turns = [play(Echo, ScriptedModel(["12", "3"], versions=[0, 0])), play(Echo, ScriptedModel(["4", "56"], [0, 0]))]
    episodes = [Episode(c, 1.0, advantage) for c, advantage in zip(turns, [1.0, -0.5])]
    model_tokens = sum(c.model_tokens for c in turns)
    assert model_tokens < sum(len(c.token_ids) for c in turns)  # the episodes hold environment tokens
    mesh, trainer = spawn_trainer(tiny_checkpoint, procs=1)
    try:
        metrics = trainer.train_step.call_one(episodes).get().metrics
    finally:
        asyncio.run(meshes.stop_all(mesh))

    model = load_frozen_model(tiny_checkpoint)
    batch = pack_episodes(episodes, PAD_ID)
    mask = batch.response_mask.bool()
    with torch.no_grad():
        logprobs, entropy = (t[mask] for t in response_logprobs(model, batch)[:2])
    behaviour, advantages = batch.behaviour_logprobs[mask], batch.advantages[mask]
    log_ratio = logprobs - behaviour
    weights = log_ratio.exp().clamp(max=ImportanceConfig().cap)  # truncated IS, the default
    assert metrics["train/response_tokens"] == model_tokens
    assert metrics["train/entropy"] == pytest.approx(entropy.mean().item(), rel=1e-4)
    assert metrics["train/loss"] == pytest.approx(
        -(advantages * weights * logprobs).sum().item() / model_tokens, rel=1e-4
    )
    assert metrics["is/weight_mean"] == pytest.approx(weights.mean().item(), rel=1e-4)
    k3 = (log_ratio.exp() - 1 - log_ratio).mean().item()
    assert metrics["is/mismatch_kl"] == pytest.approx(k3, rel=1e-4)
    assert metrics["train/clip_frac"] == 0.0 and metrics["is/truncated_frac"] == pytest.approx(
        (log_ratio.exp() > ImportanceConfig().cap * (1 + 1e-5)).float().mean().item()
    )
