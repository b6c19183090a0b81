"""An agent episode as the runner sees it: an Environment whose observations are the agent's
requests.

    reset(prompt)  start the agent function with the prompt and its session's base URL;
                   the token ids of its first request are the first observation
    step(turn)     the model's turn answers the request waiting for it; then the ids the
                   agent's next request adds are the next observation, or, when the agent
                   returns, its value ends the episode: a number is its reward, text its
                   final answer, scored by the task's reward (EnvStep.answer)
    close()        the session ends (a request still waiting gets a 409) and the agent
                   function is cancelled if it still runs

So an agent episode gets everything a native one has: turns sampled with per-token
versions and logprobs, the env.max_turns / max_episode_tokens limits, env.timeout_s on
each wait, drops counted by reason. Its own reasons: agent_error (the agent raised, or
returned no number), agent_timeout (env.agent.episode_timeout_s), agent_history_edit and
agent_template_not_append_only (envs/agent/conversation.py).
"""

import asyncio
import inspect
import math
import numbers
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property

from forge_async.config.callables import load_callable
from forge_async.envs.agent.config import AGENT_PREFIX, AgentConfig
from forge_async.envs.agent.conversation import Conversation, HistoryEdited
from forge_async.envs.agent.endpoint import SERVED_MODEL, shared_endpoint, stop_shared_endpoint
from forge_async.envs.agent.replies import ToolCallReader
from forge_async.envs.agent.session import AgentSession, Asked, Returned, SessionEnded
from forge_async.envs.environment import EnvStep, ModelTurn
from forge_async.envs.runner import EpisodeDropped
from forge_async.errors import ConfigError
from forge_async.tasks.task import Prompt


def load_agent(name: str):
    """The async agent function env.name=agent:module:function names; a ConfigError if it is not one."""
    spec = name.removeprefix(AGENT_PREFIX)
    agent = load_callable(spec, "env.name")
    if not inspect.iscoroutinefunction(agent):
        raise ConfigError(
            f"env.name={name}: {spec} must be an async function: async def f(prompt, base_url) -> reward or answer"
        )
    return agent


class AgentEpisodes:
    """The factory of agent episodes (picklable: env.procs >= 1 sends it to environment procs)."""

    def __init__(self, name: str, config: AgentConfig, tokenizer):
        self.name, self.config, self.tokenizer = name, config, tokenizer

    def __call__(self) -> "AgentEnvironment":
        return AgentEnvironment(self)

    async def prepare_process(self) -> None:
        """This process's endpoint up before the first episode (its start takes seconds and would
        otherwise count against that episode's env.timeout_s)."""
        await shared_endpoint(self.config)

    @cached_property
    def agent(self):
        return load_agent(self.name)

    @cached_property
    def tool_calls(self) -> ToolCallReader | None:
        return ToolCallReader(self.config.tool_parser, self.tokenizer) if self.config.tool_parser else None

    def __getstate__(self) -> dict:
        return {"name": self.name, "config": self.config, "tokenizer": self.tokenizer}  # made again where it lands


class AgentEnvironment:
    def __init__(self, episodes: AgentEpisodes):
        self.episodes = episodes
        self.session: AgentSession | None = None

    async def reset(self, prompt: Prompt) -> list[int]:
        self.endpoint = await shared_endpoint(self.episodes.config)
        self.session = AgentSession(Conversation(self.episodes.tokenizer), self.episodes.tool_calls, SERVED_MODEL)
        self.session_id = self.endpoint.open_session(self.session)
        self.deadline = asyncio.get_running_loop().time() + self.episodes.config.episode_timeout_s
        self.agent = asyncio.create_task(self._run_agent(prompt))
        event = await self._next_event()
        if isinstance(event, Returned):
            raise EpisodeDropped("agent_error", "the agent returned before asking the model for a turn")
        return event.token_ids

    def _open_session(self) -> AgentSession:
        """The session `reset` opened."""
        if self.session is None:
            raise RuntimeError("the agent's episode has no session: reset() first")
        return self.session

    async def step(self, turn: ModelTurn) -> EnvStep:
        session = self._open_session()
        try:
            session.answer(turn)
        except SessionEnded as err:
            raise EpisodeDropped("agent_error", str(err)) from None
        event = await self._next_event()
        if isinstance(event, Asked):
            return EnvStep(observation=event.token_ids)
        if isinstance(event.value, str):
            return EnvStep(done=True, answer=event.value)  # the task's reward scores it
        return EnvStep(reward=_reward(event.value), done=True)

    async def close(self) -> None:
        if self.session is None:
            return
        self.session.end("a turn or token limit ended it, or it was dropped")
        self.endpoint.close_session(self.session_id)
        self.agent.cancel()
        await asyncio.gather(self.agent, return_exceptions=True)

    async def _run_agent(self, prompt: Prompt) -> None:
        """The agent function, its return value or error put on the session's events."""
        events = self._open_session().events
        try:
            value = await self.episodes.agent(prompt, self.endpoint.base_url(self.session_id))
        except Exception as err:
            events.put_nowait(err)
        else:
            events.put_nowait(Returned(value))

    async def _next_event(self) -> Asked | Returned:
        """The agent's next request or its return; its failures as EpisodeDropped."""
        remaining = self.deadline - asyncio.get_running_loop().time()
        events = self._open_session().events
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                event = await events.get()
        except TimeoutError:
            timeout = self.episodes.config.episode_timeout_s
            raise EpisodeDropped("agent_timeout", f"the agent ran past env.agent.episode_timeout_s={timeout}") from None
        if isinstance(event, HistoryEdited):
            raise EpisodeDropped(event.reason, f"the agent's request does not extend its conversation: {event}")
        if isinstance(event, Exception):
            raise EpisodeDropped("agent_error", f"the agent raised {type(event).__name__}: {event}")
        return event


def _reward(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise EpisodeDropped(
            "agent_error",
            f"the agent returned {value!r}; an agent returns its reward (a finite number) or its answer (text)",
        )
    return float(value)


@asynccontextmanager
async def agent_environments(name: str, config: AgentConfig, tokenizer) -> AsyncIterator[AgentEpisodes]:
    """env.name=agent:...'s episodes; this process's endpoint stopped after the block."""
    episodes = AgentEpisodes(name, config, tokenizer)
    try:
        _ = episodes.tool_calls  # an unknown env.agent.tool_parser fails now, not in every episode
    except KeyError as err:
        raise ConfigError(f"env.agent.tool_parser={config.tool_parser!r}: not a vLLM tool parser ({err})") from None
    try:
        await episodes.prepare_process()
        yield episodes
    finally:
        await stop_shared_endpoint()
