"""Agent programs through the OpenAI-compatible endpoint (env.name=agent:module:function): a real
`openai` client against the real endpoint, the same tokens as a native environment, history edits,
malformed requests, tool calls, agents that fail; and a GRPO run whose agents sometimes fail."""

import asyncio
import copy
import json
import random
import statistics

import httpx
import openai
import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.envs.agent.config import AgentConfig
from forge_async.envs.agent.endpoint import stop_shared_endpoint
from forge_async.config.callables import CallableError
from forge_async.envs.agent.environment import AgentEpisodes, agent_environments
from forge_async.envs.config import EnvConfig
from forge_async.envs.registry import build_task, check_environment_name
from forge_async.errors import ConfigError
from forge_async.envs.runner import EnvRunner, EpisodeDropped, EpisodeLimits, with_environment
from forge_async.models.tokenizer import EOS, VOCAB, build_byte_tokenizer, build_digit_tokenizer
from forge_async.tasks.config import TaskConfig
from forge_async.envs.games.tool_lookup import ToolLookupEnv, ToolLookupTask
from tests.support.app_runs import assert_finished_dropping
from tests.support.scripted import ScriptedText

pytestmark = pytest.mark.unit

DIGITS = build_digit_tokenizer()
BYTES = build_byte_tokenizer()
EOS_ID = VOCAB.index(EOS)
LOOKUP_AGENT = "agent:docs.examples.tool_lookup_agent:play"


class LookupModel:
    """Stands in for the generator (the endpoint is what is tested here): plays tool_lookup right,
    whatever the episode. Turn 1 calls the prompt's key, turn 2 answers the tool's reply."""

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        digit = prompt_ids[1] if len(prompt_ids) == 3 else prompt_ids[-2]  # <bos> key <sep> / ... value <sep>
        version = len(prompt_ids)  # a different version for each turn, to see them kept
        return Completion(prompt_ids, [digit, EOS_ID], [-0.25, -0.5], [version, version], str(digit), "stop")


def runner_of(new_environment, tokenizer=DIGITS, episode_timeout_s: float = 30.0) -> EnvRunner:
    if isinstance(new_environment, str):
        new_environment = AgentEpisodes(new_environment, AgentConfig(episode_timeout_s=episode_timeout_s), tokenizer)
    limits = EpisodeLimits(max_turns=4, max_episode_tokens=200, context=256)
    return EnvRunner(new_environment, tokenizer, SamplingConfig(max_tokens=40), limits, timeout_s=10.0)


def play_all(runner: EnvRunner, prompts, model) -> list[Completion | EpisodeDropped]:
    """Every prompt's episode at once; the endpoint stopped after."""

    async def one(prompt):
        try:
            return await runner.play(prompt, model)
        except EpisodeDropped as drop:
            return drop

    async def main():
        try:
            prepare = getattr(runner.new_environment, "prepare_process", None)
            if prepare is not None:  # as the run does, before the first episode
                await prepare()
            return await asyncio.gather(*(one(p) for p in prompts))
        finally:
            await stop_shared_endpoint()

    return asyncio.run(main())


def lookup_prompts(count: int):
    task = ToolLookupTask(DIGITS, 10)
    rng = random.Random(0)
    return [task.sample(rng) for _ in range(count)]


def test_an_openai_client_agent_gets_the_native_environments_tokens_in_concurrent_sessions():
    prompts = lookup_prompts(24)
    native = play_all(runner_of(lambda: ToolLookupEnv(EOS_ID)), prompts, LookupModel())
    agent = play_all(runner_of(LOOKUP_AGENT), prompts, LookupModel())
    for n, a in zip(native, agent, strict=True):
        assert isinstance(a, Completion), a
        # Token in, token out: the model's turns verbatim, the tool's reply as the template adds it.
        assert (a.prompt_ids, a.token_ids, a.versions, a.logprobs) == (
            n.prompt_ids,
            n.token_ids,
            n.versions,
            n.logprobs,
        )
        assert (a.turns, a.finish_reason) == (n.turns, n.finish_reason) == (2, "done")
        assert a.env_reward == n.env_reward == pytest.approx(1.0)  # each session got its own turns


def test_an_agent_that_edits_its_history_raises_or_hangs_is_dropped_by_reason():
    prompts = {p.meta["key"]: p for p in lookup_prompts(60)}
    drops = play_all(runner_of("agent:tests.flaky_agent:play"), [prompts[7], prompts[8]], LookupModel())
    assert [d.reason for d in drops] == ["agent_error", "agent_history_edit"]
    assert "the agent's own tool crashed" in str(drops[0])
    assert "message 0 (user) differs" in str(drops[1])
    [hung] = play_all(runner_of(f"agent:{__name__}:hangs", episode_timeout_s=0.5), [prompts[1]], LookupModel())
    assert hung.reason == "agent_timeout"
    [silent] = play_all(runner_of(f"agent:{__name__}:returns_nothing"), [prompts[1]], LookupModel())
    assert silent.reason == "agent_error" and "a finite number" in str(silent)


async def hangs(prompt, base_url):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1"}])
    await asyncio.sleep(3600)


async def returns_nothing(prompt, base_url):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1"}])


async def answers(prompt, base_url):
    """Asks the model once, then returns the prompt's answer as its own (odd digits: a wrong one)."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt.text}])
    return prompt.answer if int(prompt.answer) % 2 == 0 else str((int(prompt.answer) + 1) % 10)


def test_an_agents_text_answer_is_scored_by_the_tasks_reward():
    task = build_task(TaskConfig(name="max_digit", num_digits=3), DIGITS, 10)
    episodes = AgentEpisodes(f"agent:{__name__}:answers", AgentConfig(), DIGITS)
    played_task = with_environment(task, episodes, DIGITS)
    rng = random.Random(0)
    prompts = [task.sample(rng) for _ in range(12)]
    done = play_all(runner_of(episodes), prompts, LookupModel())
    for prompt, completion in zip(prompts, done, strict=True):
        right = int(prompt.answer) % 2 == 0
        assert completion.answer == (prompt.answer if right else str((int(prompt.answer) + 1) % 10))
        # max_digit's own reward: 1 for the digit then EOS (the answer counts as said and ended).
        assert played_task.reward(prompt, completion) == (1.0 if right else 0.0)
    assert {int(p.answer) % 2 for p in prompts} == {0, 1}


ANSWERS: dict[str, tuple[int, str]] = {}  # what each malformed request got back: status, error message


async def sends_malformed_requests(prompt, base_url):
    """Malformed requests first (each answered 4xx, the session still open), then a good one."""
    url = f"{base_url}/chat/completions"
    good = {"model": "policy", "messages": [{"role": "user", "content": "3"}]}
    requests = {
        "not json": {"content": b"{not json", "headers": {"content-type": "application/json"}},
        "not an object": {"json": [1, 2]},
        "no messages": {"json": {"model": "policy"}},
        "streaming": {"json": {**good, "stream": True}},
        "two choices": {"json": {**good, "n": 2}},
        "unknown tokens": {"json": {"model": "policy", "messages": [{"role": "user", "content": "three"}]}},
    }
    async with httpx.AsyncClient() as http:
        for name, request in requests.items():
            answer = await http.post(url, **request)
            ANSWERS[name] = answer.status_code, answer.json()["error"]["message"]
        answer = await http.post(url.replace("/sessions/", "/sessions/0"), json=good)
        ANSWERS["unknown session"] = answer.status_code, answer.json()["error"]["message"]
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    reply = await client.chat.completions.create(**good)
    return 1.0 if reply.choices[0].message.content == "3" else 0.0


def test_malformed_requests_are_answered_4xx_and_the_session_goes_on():
    [done] = play_all(runner_of(f"agent:{__name__}:sends_malformed_requests"), lookup_prompts(1), LookupModel())
    assert isinstance(done, Completion) and done.env_reward == 1.0
    statuses = {name: status for name, (status, _) in ANSWERS.items()}
    assert statuses == {
        "not json": 400,
        "not an object": 400,
        "no messages": 400,
        "streaming": 400,
        "two choices": 400,
        "unknown tokens": 400,
        "unknown session": 404,
    }
    assert "stream=true is not supported" in ANSWERS["streaming"][1]
    assert "no tokens for part of the request" in ANSWERS["unknown tokens"][1]


LOOKUP_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"key": {"type": "integer"}}}},
}


async def calls_a_tool(prompt, base_url):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "What is stored under key 4?"}]
    first = await client.chat.completions.create(model="policy", messages=messages, tools=[LOOKUP_TOOL])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"key": 4})
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "7"},
    ]
    second = await client.chat.completions.create(model="policy", messages=messages, tools=[LOOKUP_TOOL])
    return 1.0 if second.choices[0].message.content == "7" else 0.0


def test_tool_calls_come_back_in_the_openai_format_and_go_on_in_the_same_session():
    config = AgentConfig(tool_parser="hermes")
    episodes = AgentEpisodes(f"agent:{__name__}:calls_a_tool", config, BYTES)
    model = ScriptedText(['<tool_call>\n{"name": "lookup", "arguments": {"key": 4}}\n</tool_call>', "7"])
    [done] = play_all(runner_of(episodes, BYTES), lookup_prompts(1), model)
    assert isinstance(done, Completion), done
    assert (done.env_reward, done.turns) == (1.0, 2)
    # The model's tool call is in the episode as it sampled it; the tool's reply as the template adds it.
    assert "<tool_call>" in done.text and BYTES.encode("<|tool|>7<|assistant|>", add_special_tokens=False) == [
        t for t, v in zip(done.token_ids, done.versions) if v == -1
    ]


def test_a_chat_template_that_is_not_append_only_drops_the_episode():
    tokenizer = copy.deepcopy(BYTES)
    # Like templates that drop past reasoning: an assistant message is shown only while it is the last.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|' ~ m['role'] ~ '|>' ~ m['content'] }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    episodes = AgentEpisodes(f"agent:{__name__}:two_turns", AgentConfig(), tokenizer)
    [drop] = play_all(runner_of(episodes, tokenizer), lookup_prompts(1), ScriptedText(["a", "b"]))
    assert drop.reason == "agent_template_not_append_only"


async def two_turns(prompt, base_url):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    first = await client.chat.completions.create(model="policy", messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "?"}]
    await client.chat.completions.create(model="policy", messages=messages)
    return 1.0


@pytest.mark.e2e
def test_tool_lookup_learns_through_openai_client_agents_on_an_environment_proc(tmp_path):
    """A GRPO run whose episodes are agent programs on a proc of its own (its endpoint there too),
    some of which fail: they are counted and the run learns."""
    run = run_app(
        tmp_path / "run",
        "--config-name=tool_lookup",
        "steps=40",
        "env.procs=1",
        "env.name=agent:tests.flaky_agent:play",
        timeout=900,
    )
    dropped = assert_finished_dropping(run, "agent_error", "agent_history_edit")
    assert set(dropped) <= {"agent_error", "agent_history_edit", "stale"}, dropped  # no other mismatch
    metrics = run.metrics
    first, last = (statistics.fmean(m["reward/mean"] for m in part) for part in (metrics[:10], metrics[-10:]))
    assert first < 0.06 and last > first + 0.05, (first, last)
    assert max(m["policy/version_spread_max"] for m in metrics) >= 1  # turns under different versions


def test_a_bad_agent_config_fails_at_start_naming_the_key():
    with pytest.raises(ConfigError, match=r"env.name=agent:json:dumps: json:dumps must be an async function"):
        check_environment_name(EnvConfig(name="agent:json:dumps"))
    with pytest.raises(CallableError, match=r"env.name 'no_such_module:play' cannot be imported"):
        check_environment_name(EnvConfig(name="agent:no_such_module:play"))
    with pytest.raises(ConfigError, match=r"env.agent.episode_timeout_s=0: must be > 0"):
        AgentConfig(episode_timeout_s=0)

    async def open_with_an_unknown_parser():
        async with agent_environments(LOOKUP_AGENT, AgentConfig(tool_parser="no_such_parser"), DIGITS):
            pass

    with pytest.raises(ConfigError, match=r"env.agent.tool_parser='no_such_parser': not a vLLM tool parser"):
        asyncio.run(open_with_an_unknown_parser())
