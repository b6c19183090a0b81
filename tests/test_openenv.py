"""env.name=openenv against a real OpenEnv server process (the repo's tool_lookup server under
uvicorn): episodes as the native ones, sessions at once, drops by reason, start-up errors,
and one GRPO run learning through it. Sessions within a server's capacity (probed, waited
for, refusals retried), reset arguments and episodes that never start on servers that count
their sessions (tests/openenv_servers/counted_sessions.py)."""

import asyncio
import json
import os
import random
import signal
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.envs.environment import ModelTurn
from forge_async.envs.config import EnvConfig, OpenEnvConfig
from forge_async.data.buffer import DropCounts, EpisodeBuffer
from forge_async.data.episode import Completion
from forge_async.envs.openenv import check_openenv, openenv_environments
from forge_async.envs.openenv.capacity import ProbeFailed, SessionLimit, probe_capacity
from forge_async.envs.openenv.server_process import ServerNotUp, ServerProcess, is_healthy
from forge_async.cluster.hosts import free_port
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits
from forge_async.errors import ConfigError
from forge_async.envs.games.tool_lookup import ToolLookupTask
from tests.openenv_servers.counted_sessions import LOG_VARIABLE
from tests.support.app_runs import assert_accounting
from tests.support.digits import EOS_ID, TOKENIZER
from tests.support.scripted import ScriptedModel

pytestmark = pytest.mark.unit

APP = "forge_async.envs.servers.tool_lookup_openenv:app"
COUNTED = "tests.openenv_servers.counted_sessions"
TASK = ToolLookupTask(TOKENIZER, max_prompt_tokens=8)


def openenv_config(**fields) -> EnvConfig:
    return EnvConfig(name="openenv", max_turns=2, openenv=OpenEnvConfig(**{"token_ids_field": "token_ids", **fields}))


def tool_lookup_runner(new_environment, session_limit=None) -> EnvRunner:
    return EnvRunner(
        new_environment, TOKENIZER, SamplingConfig(max_tokens=3), EpisodeLimits(2, 64, 64), 10.0,
        session_limit=session_limit,
    )  # fmt: skip


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


@pytest.mark.procs
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
            n.prompt_ids,
            n.token_ids,
            n.versions,
            n.turns,
            n.finish_reason,
        )
        assert r.env_reward == pytest.approx(n.env_reward)
    assert [round(c.env_reward, 6) for c in remote] == [1.0, 0.1, 0.0, 0.3]  # per-step rewards summed
    assert remote[0].token_ids[2:4] == TOKENIZER.encode(answers(prompts[0])[1] + "<sep>", add_special_tokens=False)
    assert remote[2].turns == 1  # a malformed call: the server says done after the first turn


@pytest.mark.procs
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


@pytest.mark.procs
def test_sessions_run_at_once_and_one_past_the_servers_limit_is_refused(server, tmp_path):
    prompt = TASK.sample(random.Random(0))

    async def open_sessions(count: int, limit: int):
        """`count` sessions at once on a server the run serves, told to hold `limit` (the module's
        server holds 6); a refused session is asked for again for 0.3 s."""
        config = openenv_config(app=APP, refused_retry_s=0.3) if limit != 6 else openenv_config(url=server.url)
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


@pytest.mark.procs
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


@pytest.mark.e2e
def test_a_url_nothing_answers_fails_at_start_naming_it(tmp_path):
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(ServerNotUp, match=f"no OpenEnv server answered {url}/health within 1s"):
        check_openenv(OpenEnvConfig(url=url, startup_timeout_s=1))
    # The app says so in one line, before any proc is spawned.
    run = run_app(tmp_path / "run", "env.name=openenv", f"env.openenv.url={url}", "env.openenv.startup_timeout_s=1")
    assert run.returncode == 2, run.output
    assert f"{url}/health" in run.output and "Traceback" not in run.output and "spawning" not in run.output


@pytest.mark.procs
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


@pytest.mark.e2e
def test_tool_lookup_learns_through_an_openenv_server_the_run_serves(tmp_path):
    steps = 60
    run = run_app(
        tmp_path / "run",
        "--config-name=tool_lookup_openenv",
        f"steps={steps}",
        "env.openenv.workers=2",
        "env.openenv.startup_timeout_s=300",
        timeout=900,
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


# Sessions within the server's capacity


@pytest.fixture
def counted_server(tmp_path, monkeypatch):
    """Starts `tests.openenv_servers.counted_sessions:<app>` (a real uvicorn process); yields its
    URL and the file where it logs its peak of sessions held at once and its resets' arguments."""
    log = tmp_path / "sessions.jsonl"
    monkeypatch.setenv(LOG_VARIABLE, str(log))
    servers = []

    def start(app: str) -> tuple[str, Path]:
        process = ServerProcess(f"{COUNTED}:{app}", workers=1, sessions=1, log_path=tmp_path / f"{app}.log")
        servers.append(process)
        process.start()
        process.wait_until_up(120)
        return process.url, log

    yield start
    for process in servers:
        process.stop()


def counted_config(**fields) -> EnvConfig:
    """A counted server's episodes: tool_lookup's, shown its `message` field."""
    return openenv_config(observation_field="message", **fields)


def logged(log: Path, kind: str) -> list:
    return [record[kind] for record in map(json.loads, log.read_text().splitlines()) if kind in record]


def play_at_once(config: EnvConfig, in_flight: int, limited: bool = True) -> list[Completion | EpisodeDropped]:
    """`in_flight` tool_lookup episodes played at once on config's server, the run's session bound
    kept (or not)."""
    prompts = [TASK.sample(random.Random(seed)) for seed in range(in_flight)]

    async def play():
        async with openenv_environments(config, EOS_ID, in_flight) as sessions:
            runner = tool_lookup_runner(sessions, sessions.session_limit if limited else None)
            return await asyncio.gather(
                *(runner.play(p, ScriptedModel(list(answers(p)), [0, 0])) for p in prompts), return_exceptions=True
            )

    return asyncio.run(play())


@pytest.mark.procs
def test_the_probe_learns_a_servers_capacity_from_its_refusal_and_closes_every_session(counted_server):
    url, log = counted_server("four_sessions")
    assert asyncio.run(probe_capacity(url, 10, 30)) == 4
    assert asyncio.run(probe_capacity(url, 3, 30)) is None  # it held the 3 asked for
    assert asyncio.run(probe_capacity(url, 10, 30)) == 4  # none of the first probe's sessions left open
    assert max(logged(log, "peak")) == 4


@pytest.mark.procs
def test_a_server_that_cannot_make_a_session_fails_the_probe_in_one_line(counted_server):
    url, _ = counted_server("no_sessions")
    with pytest.raises(
        ProbeFailed, match=f"sessions of the OpenEnv server at {url}: it could not open a session: .*FACTORY_ERROR"
    ):
        asyncio.run(probe_capacity(url, 40, 30))  # past its capacity (4): refusals among the failures


@pytest.mark.procs
def test_episodes_wait_for_the_one_session_a_server_holds_and_none_is_refused(counted_server, capsys):
    url, log = counted_server("one_session")
    # A refusal would drop its episode at once (no retries): every episode must wait for the session.
    outcomes = play_at_once(counted_config(url=url, refused_retry_s=0), in_flight=6)
    assert all(isinstance(o, Completion) for o in outcomes), outcomes
    assert [round(o.env_reward, 6) for o in outcomes] == [1.0] * 6
    assert max(logged(log, "peak")) == 1
    assert (
        f"OpenEnv server at {url}: 1 session at a time (probed): 1 of the run's 6 episodes" in capsys.readouterr().out
    )


@pytest.mark.procs
def test_the_run_holds_no_more_sessions_than_env_openenv_max_sessions(counted_server, capsys):
    url, log = counted_server("four_sessions")
    outcomes = play_at_once(counted_config(url=url, max_sessions=2, refused_retry_s=0), in_flight=8)
    assert all(isinstance(o, Completion) for o in outcomes), outcomes
    assert max(logged(log, "peak")) == 2
    assert "2 sessions at a time (env.openenv.max_sessions): 2 of the run's 8 episodes" in capsys.readouterr().out


def test_the_session_bound_says_once_the_episodes_per_second_its_sessions_allow(capsys):
    limit, holding, peak = SessionLimit(2, wait_s=30, url="http://server"), 0, 0

    async def episode() -> None:
        nonlocal holding, peak
        async with limit:
            holding += 1
            peak = max(peak, holding)
            await asyncio.sleep(0.01)  # each episode holds its session 10 ms or more
            holding -= 1

    async def dropped() -> None:
        async with limit:
            raise EpisodeDropped("openenv_error", "dropped at once", started=False)

    async def episodes(n: int) -> None:
        await asyncio.gather(*(dropped() for _ in range(n)), return_exceptions=True)  # not measured: 0 s each
        await asyncio.gather(*(episode() for _ in range(n)))

    asyncio.run(episodes(100))
    lines = [line for line in capsys.readouterr().out.splitlines() if "episodes/s" in line]
    assert len(lines) == 1 and "OpenEnv server at http://server: an episode holds its session " in lines[0], lines
    assert "(the first 64): 2 sessions at once allow at most " in lines[0]
    assert 0 < int(lines[0].rsplit("at most ", 1)[1].split()[0]) <= 200  # 2 sessions / 10 ms
    assert peak == 2


@pytest.mark.procs
def test_a_refused_session_is_asked_for_again_until_refused_retry_s_then_dropped(counted_server):
    url, log = counted_server("four_sessions")
    # Without the run's bound, 6 episodes at once meet a server of 4: two are refused at first.
    retried = play_at_once(counted_config(url=url, refused_retry_s=5), in_flight=6, limited=False)
    assert all(isinstance(o, Completion) for o in retried), retried
    dropped = play_at_once(counted_config(url=url, refused_retry_s=0), in_flight=6, limited=False)
    refused = [o for o in dropped if isinstance(o, EpisodeDropped)]
    assert [(d.reason, d.started) for d in refused] == [("openenv_refused", False)] * 2, dropped
    assert "refused for env.openenv.refused_retry_s=0s" in str(refused[0])
    assert max(logged(log, "peak")) == 4


@pytest.mark.procs
def test_reset_kwargs_reach_the_servers_reset_with_fields_of_the_prompt(counted_server):
    url, log = counted_server("four_sessions")
    prompt = TASK.sample(random.Random(0))
    kwargs = {"dataset_name": "chain_sum", "size": 100, "key": "{meta.key}", "label": "key-{meta.key}"}

    async def reset(reset_kwargs: dict):
        config = openenv_config(url=url, observation_field="received", reset_kwargs=reset_kwargs)
        async with openenv_environments(config, EOS_ID, 1) as sessions:
            env = sessions()
            try:
                return json.loads(await env.reset(prompt))
            finally:
                await env.close()

    received = asyncio.run(reset(kwargs))
    key = prompt.meta["key"]
    assert received == {
        "dataset_name": "chain_sum",
        "size": 100,
        "key": key,
        "label": f"key-{key}",
        "seed": received["seed"],
    }
    assert asyncio.run(reset({"seed": "{meta.key}"}))["seed"] == key  # over the seed the run draws
    with pytest.raises(EnvironmentFailed, match=r"env.openenv.reset_kwargs.size: the task's prompt has no meta.size"):
        asyncio.run(reset({"size": "{meta.size}"}))
    with pytest.raises(ConfigError, match=r"reset_kwargs.size='\{sizes\}': \{sizes\} is no field of a prompt"):
        check_openenv(OpenEnvConfig(url=url, reset_kwargs={"size": "{sizes}"}))


@pytest.mark.e2e
def test_a_run_on_a_server_of_one_session_drops_none_for_capacity_and_counts_unstarted_episodes_apart(
    tmp_path, monkeypatch
):
    log = tmp_path / "sessions.jsonl"
    monkeypatch.setenv(LOG_VARIABLE, str(log))
    run = run_app(
        tmp_path / "run", "--config-name=tool_lookup_openenv", "steps=3", "prompts_per_step=4", "group_size=4",
        "rollout_workers=2", "prompts_per_rollout=2", "eval.every_steps=0", "env.procs=1",
        f"env.openenv.app={COUNTED}:one_session_no_low_keys", "env.openenv.observation_field=message",
        "env.openenv.refused_retry_s=0",  # a session the run's bound let through to a full server: dropped
        "env.openenv.reset_kwargs={level: '{meta.key}', dataset_name: chain_sum}", timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.output
    # Two rollout workers' episodes, their sessions held by an environment proc: one at a time.
    assert "1 session at a time (probed): 1 of the run's 16 episodes in flight play at once" in run.output
    assert max(logged(log, "peak")) == 1
    resets = logged(log, "reset")
    assert resets and all(r["dataset_name"] == "chain_sum" and isinstance(r["level"], int) for r in resets)
    summary = run.summary
    assert_accounting(summary)
    # Resets of keys 0-2 fail: those episodes never reached a generator, and are not counted as generated.
    unstarted = summary["not_started_by_reason"].get("openenv_error", 0)
    assert unstarted > 0 and summary["not_started"] == unstarted, summary
    assert summary["dropped_by_reason"].get("openenv_error") == unstarted
    assert not {"openenv_refused", "openenv_session_wait"} & set(summary["dropped_by_reason"]), summary
    assert summary["dropped_other"] == sum(summary["dropped_by_reason"].values()) - summary["dropped_stale"] - unstarted
    assert "not started (dropped before reaching a generator" in run.output


class FailsAt:
    """An environment whose `reset` or first `step` raises."""

    def __init__(self, method: str):
        self.method = method

    def reset(self, prompt):
        if self.method == "reset":
            raise RuntimeError("no table")
        return prompt.text

    def step(self, turn):
        raise RuntimeError("no lookup")


def test_a_drop_before_the_first_model_turn_is_counted_apart_from_generated():
    prompt = TASK.sample(random.Random(0))
    drops = []
    for method in ("reset", "step"):
        with pytest.raises(EpisodeDropped) as drop:
            asyncio.run(
                tool_lookup_runner(lambda method=method: FailsAt(method)).play(prompt, ScriptedModel(["1"], [0]))
            )
        drops.append(drop.value)
    assert [(d.reason, d.started) for d in drops] == [("env_error", False), ("env_error", True)]
    buffer = EpisodeBuffer(max_policy_age=1, capacity=8)
    buffer.add([], dropped=DropCounts({"env_error": 1}, {"env_error": 2, "openenv_session_wait": 1}))
    stats = buffer.stats()
    assert (stats.added, stats.dropped_other, stats.dropped_total) == (1, 1, 4)  # generated: the one that started
    assert stats.not_started == {"env_error": 2, "openenv_session_wait": 1}
    assert stats.dropped_by_reason == {"env_error": 3, "openenv_session_wait": 1}  # every drop, by reason
    restored = EpisodeBuffer(max_policy_age=1, capacity=8)
    restored.load_state_dict(buffer.state_dict())
    assert restored.stats() == stats


@pytest.mark.e2e
@pytest.mark.skipif(
    not os.environ.get("FORGE_OPENENV_REPO"),
    reason="FORGE_OPENENV_REPO: the envs/ folder of an OpenEnv checkout, for its reasoning_gym_env",
)
def test_the_openenv_repositorys_reasoning_gym_env_unmodified_holds_one_session_and_none_is_refused(
    tmp_path, monkeypatch
):
    """OpenEnv's own reasoning_gym_env (max_concurrent_envs=1), served by the run as it is."""
    envs = os.environ["FORGE_OPENENV_REPO"]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [envs, os.environ.get("PYTHONPATH")])))
    run = run_app(
        tmp_path / "run", "steps=3", "prompts_per_step=4", "group_size=4", "rollout_workers=1",
        "prompts_per_rollout=2", "eval.every_steps=0", "model.tiny.tokenizer=bytes", "env.name=openenv",
        "env.max_turns=1", "env.openenv.app=reasoning_gym_env.server.app:app",
        "env.openenv.observation_field=question", "env.openenv.action_field=answer",
        "env.openenv.reset_kwargs={dataset_name: chain_sum, size: 1, seed: '{seed}'}", timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert "1 session at a time (probed)" in run.output
    summary = run.summary
    assert_accounting(summary)
    assert summary["trained"] == 3 * 16 and summary["not_started"] == 0, summary
    assert set(summary["dropped_by_reason"]) <= {"stale"}, summary["dropped_by_reason"]
