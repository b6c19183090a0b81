"""env.name=openenv against a real OpenEnv server process (the repo's tool_lookup server under
uvicorn): episodes as the native ones, sessions at once, drops by reason, start-up errors,
and one GRPO run learning through it."""

import asyncio
import os
import random
import signal
import statistics
from dataclasses import replace

import pytest

from apps.grpo.subprocess_run import run_app
from forge_async.actors.generator_config import SamplingConfig
from forge_async.envs.environment import EnvConfig, ModelTurn, OpenEnvConfig
from forge_async.envs.openenv import check_openenv, openenv_environments
from forge_async.envs.openenv.server_process import ServerNotUp, ServerProcess, is_healthy
from forge_async.launch.hosts import free_port
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits
from forge_async.errors import ConfigError
from forge_async.tasks.tool_lookup import ToolLookupTask
from test_environments import EOS_ID, TOKENIZER, ScriptedModel
from test_grpo_app import assert_accounting

APP = "forge_async.envs.servers.tool_lookup_openenv:app"
TASK = ToolLookupTask(TOKENIZER, max_prompt_tokens=8)


def openenv_config(**fields) -> EnvConfig:
    return EnvConfig(name="openenv", max_turns=2, openenv=OpenEnvConfig(**{"token_ids_field": "token_ids", **fields}))


def tool_lookup_runner(new_environment) -> EnvRunner:
    return EnvRunner(new_environment, TOKENIZER, SamplingConfig(max_tokens=3), EpisodeLimits(2, 64, 64), 10.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The repo's tool_lookup server, a real uvicorn process, for this module's tests."""
    process = ServerProcess(APP, workers=1, sessions=6, log_path=tmp_path_factory.mktemp("openenv") / "server.log")
    process.start()
    try:
        process.wait_until_up(120)
        yield process
    finally:
        process.stop()


def sessions_on(url: str):
    return openenv_environments(openenv_config(url=url), EOS_ID, 1)


def answers(prompt) -> tuple[str, str]:
    """The two turns that earn the whole reward: the prompt's key, then its value."""
    key = prompt.meta["key"]
    return str(key), str(prompt.meta["table"][key])


def test_episodes_over_the_websocket_are_the_native_ones_token_for_token(server):
    prompts = [TASK.sample(random.Random(seed)) for seed in range(4)]
    scripts = [answers(prompts[0]), ("3", "9"), ("12", "1"), (answers(prompts[3])[0], "0")]  # right, wrong, malformed

    async def play_all(new_environment):
        runner = tool_lookup_runner(new_environment)
        return [await runner.play(p, ScriptedModel(list(s), [0, 1])) for p, s in zip(prompts, scripts)]

    async def over_openenv():
        async with sessions_on(server.url) as sessions:
            return await play_all(sessions)

    native = asyncio.run(play_all(TASK.new_environment))
    remote = asyncio.run(over_openenv())
    for n, r in zip(native, remote):
        assert (r.prompt_ids, r.token_ids, r.versions, r.turns, r.finish_reason) == (
            n.prompt_ids, n.token_ids, n.versions, n.turns, n.finish_reason
        )
        assert r.env_reward == pytest.approx(n.env_reward)
    assert [round(c.env_reward, 6) for c in remote] == [1.0, 0.1, 0.0, 0.3]  # per-step rewards summed
    assert remote[0].token_ids[2:4] == TOKENIZER.encode(answers(prompts[0])[1] + "<sep>", add_special_tokens=False)
    assert remote[2].turns == 1  # a malformed call: the server says done after the first turn


def test_a_step_carries_its_reward_and_done(server):
    prompt = TASK.sample(random.Random(0))
    key, value = answers(prompt)

    async def episode():
        async with sessions_on(server.url) as sessions:
            env = sessions()
            try:
                first = await env.reset(prompt)
                call = await env.step(ModelTurn(key, [int(key), EOS_ID], "stop", 0))
                answer = await env.step(ModelTurn(value, [int(value), EOS_ID], "stop", 1))
            finally:
                await env.close()
            return first, call, answer

    first, call, answer = asyncio.run(episode())
    assert first == prompt.text
    assert (call.observation, call.reward, call.done) == (value, pytest.approx(0.3), False)
    assert (answer.reward, answer.done) == (pytest.approx(0.7), True)


def test_sessions_run_at_once_and_one_past_the_servers_limit_is_refused(server, tmp_path):
    prompt = TASK.sample(random.Random(0))

    async def open_sessions(count: int, limit: int):
        """`count` sessions at once on a server the run serves, told to hold `limit` (the module's
        server holds 6)."""
        config = openenv_config(app=APP) if limit != 6 else openenv_config(url=server.url)
        async with openenv_environments(config, EOS_ID, limit, tmp_path) as sessions:
            envs = [sessions() for _ in range(count)]
            try:
                # Every session reset before any steps: each holds its own environment at once.
                resets = await asyncio.gather(*(e.reset(prompt) for e in envs), return_exceptions=True)
                key, _ = answers(prompt)
                live = [e for e, r in zip(envs, resets) if not isinstance(r, Exception)]
                calls = await asyncio.gather(*(e.step(ModelTurn(key, [int(key), EOS_ID], "stop", 0)) for e in live))
                return resets, calls
            finally:
                await asyncio.gather(*(e.close() for e in envs))

    resets, calls = asyncio.run(open_sessions(6, limit=6))
    assert resets == [prompt.text] * 6 and all(c.reward == pytest.approx(0.3) for c in calls)
    resets, calls = asyncio.run(open_sessions(3, limit=2))
    refused = [r for r in resets if isinstance(r, EpisodeDropped)]
    assert len(refused) == 1 and refused[0].reason == "openenv_refused", resets
    assert len(calls) == 2


def test_a_server_killed_mid_episode_drops_its_episodes_by_reason_then_ends_the_run(tmp_path):
    prompt = TASK.sample(random.Random(0))
    key, _ = answers(prompt)

    async def kill_mid_episode():
        async with openenv_environments(openenv_config(app=APP), EOS_ID, 4, tmp_path) as sessions:
            env = sessions()
            await env.reset(prompt)
            os.killpg(sessions.server_pid, signal.SIGKILL)
            outcomes = []
            try:
                await env.step(ModelTurn(key, [int(key), EOS_ID], "stop", 0))
            except EpisodeDropped as drop:
                outcomes.append(drop)
            finally:
                await env.close()  # closing a dead session is quiet
            # The next episode: nothing listens any more. At a url (a server of the user's, which
            # may come back) that drops it; the run's own server is gone for good: the run ends.
            at_url = replace(sessions, server_pid=None)
            for new_environment in (at_url, sessions):
                try:
                    await tool_lookup_runner(new_environment).play(prompt, ScriptedModel([key, "0"], [0, 0]))
                except (EpisodeDropped, EnvironmentFailed) as failure:
                    outcomes.append(failure)
            return sessions.url, outcomes

    url, (killed, unreachable, gone) = asyncio.run(kill_mid_episode())
    assert (killed.reason, unreachable.reason) == ("openenv_disconnected", "openenv_unreachable")
    assert url.split("//")[1] in str(unreachable)
    assert isinstance(gone, EnvironmentFailed) and f"OpenEnv server the run serves at {url} is gone" in str(gone)


def test_a_url_nothing_answers_fails_at_start_naming_it(tmp_path):
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(ServerNotUp, match=f"no OpenEnv server answered {url}/health within 1s"):
        check_openenv(OpenEnvConfig(url=url, startup_timeout_s=1))
    # The app says so in one line, before any proc is spawned.
    run = run_app(tmp_path / "run", "env.name=openenv", f"env.openenv.url={url}", "env.openenv.startup_timeout_s=1")
    assert run.returncode == 2, run.output
    assert f"{url}/health" in run.output and "Traceback" not in run.output and "spawning" not in run.output


def test_an_app_that_cannot_serve_fails_naming_it_with_its_log():
    with pytest.raises(ConfigError, match="no module forge_async.no_such_server"):
        check_openenv(OpenEnvConfig(app="forge_async.no_such_server:app"))

    async def start(app: str):
        async with openenv_environments(openenv_config(app=app, startup_timeout_s=30), EOS_ID, 1):
            pass

    with pytest.raises(ServerNotUp, match=r"app=forge_async.envs.servers.tool_lookup_openenv:nope: .*exited .*nope"):
        asyncio.run(start("forge_async.envs.servers.tool_lookup_openenv:nope"))


@pytest.mark.parametrize(
    "fields, says",
    [
        ({}, "exactly one of env.openenv.url .* and env.openenv.app"),
        ({"url": "http://h:1", "app": APP}, "exactly one of env.openenv.url"),
        ({"url": "h:1"}, "env.openenv.url=h:1: must start with http://"),
        ({"app": "server"}, "env.openenv.app=server: must be module:app"),
        ({"app": APP, "workers": 0}, "env.openenv.workers=0"),
    ],
)
def test_openenv_config_errors_name_the_key(fields, says):
    with pytest.raises(ConfigError, match=says):
        EnvConfig(name="openenv", openenv=OpenEnvConfig(**fields))


def test_tool_lookup_learns_through_an_openenv_server_the_run_serves(tmp_path):
    steps = 60
    run = run_app(
        tmp_path / "run", "--config-name=tool_lookup_openenv", f"steps={steps}", "env.openenv.workers=2",
        "env.openenv.startup_timeout_s=300", timeout=900,
    )
    assert run.returncode == 0, run.output
    line = next(line for line in run.output.splitlines() if "OpenEnv server" in line)
    assert "uvicorn workers: 2, sessions a worker: 320" in line, line  # 2 x 16 groups x 8 + 64 eval
    url = line.split(" up at ")[1].split()[0]
    assert not is_healthy(url)  # stopped with the run
    assert (run.run_dir / "logs" / "openenv_server.log").is_file()
    summary = run.summary
    assert_accounting(summary)
    assert summary["dropped_other"] == 0, summary["dropped_by_reason"]
    metrics = run.metrics
    # From chance (~0.01) to well beyond it, as natively (test_environments.py).
    first, last = (statistics.fmean(m["reward/mean"] for m in part) for part in (metrics[:10], metrics[-10:]))
    assert first < 0.06 and last > first + 0.08, (first, last)
    assert run.evaluations[-1]["eval/version"] == steps  # evaluated as OpenEnv episodes too

