"""Plays one multi-turn episode: model turn, environment step, and again, until done or a limit.

The episode's completion is every token after the first observation: model turns
(with their sampled logprobs and per-token versions) and observations (version
ENV_TOKEN, logprob 0: masked from the loss). Each model turn is one generate call
with the whole episode so far as its prompt, so a turn may run under newer weights
than the one before it; the episode's policy age is that of its oldest model token.

An environment that raises, returns something malformed or (async) takes longer
than env.timeout_s gets its episode dropped: EpisodeDropped, counted by reason
(env_error, env_timeout) by the caller. The run goes on. An environment's optional
`close()` is called when its episode ends, however it ends. A drop before the first model
turn (at reset, or waiting for a session) is of an episode that never reached a generator:
`started` False, counted apart (not_started; data/buffer.py).

`session_limit`: an async context manager each episode holds while it plays, in the
process that drives the episodes (the controller), wherever their environments run: an
OpenEnv server's sessions (envs/openenv/capacity.py).
"""

import asyncio
import inspect
import math
import numbers
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import ENV_TOKEN, Completion
from forge_async.data.kept_sets import KeptSets
from forge_async.tasks.task import Prompt, Task, TaskError, prompt_token_ids
from forge_async.envs.environment import EnvStep, Environment, ModelTurn, Observation
from forge_async.envs.config import EnvConfig
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.templating import observation_ids

if TYPE_CHECKING:
    import numpy as np

EnvFactory = Callable[[], Environment]  # a new environment, for one episode
# (prompt token ids, sampling) -> the one completion the model sampled
GenerateOne = Callable[[list[int], SamplingConfig], Awaitable[Completion]]


class EpisodeDropped(Exception):
    """The environment failed this episode; `reason` is what the drop is counted as."""

    def __init__(self, reason: str, message: str, started: bool = True):
        super().__init__(message)
        self.reason = reason
        self.started = started  # False: dropped before its first model turn

    def __reduce__(self):  # it travels from environment procs (env.procs) with its reason
        return EpisodeDropped, (self.reason, str(self), self.started)


@dataclass
class EpisodeLimits:
    max_turns: int
    max_episode_tokens: int  # tokens after the first observation, within the context
    context: int  # model context: first observation + episode tokens


@dataclass
class Transcript:
    """An episode's tokens after its first observation, as they accumulate."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    # MoE models: the last model turn's routes, which cover every token fed before its last one: the
    # routes of the computation whose KV cache that turn attended to (generation/route_capture.py)
    routes: "np.ndarray | None" = None
    # The turns' kept sets (data/kept_sets.py: ids with sampling.keep_mask, each token's log mass)
    # and the observations' none, stretch by stretch; whether any turn brought them
    kept_sets: list[KeptSets] = field(default_factory=list)
    captured: bool = False

    def add_turn(self, completion: Completion) -> None:
        self.token_ids += completion.token_ids
        self.logprobs += completion.logprobs
        self.versions += completion.versions
        self.routes = completion.routes
        self.kept_sets.append(completion.kept_sets or KeptSets.none(len(completion.token_ids)))
        self.captured = self.captured or completion.kept_sets is not None

    def add_observation(self, ids: list[int]) -> None:
        self.token_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.versions += [ENV_TOKEN] * len(ids)
        self.kept_sets.append(KeptSets.none(len(ids)))

    def joined_kept_sets(self) -> KeptSets | None:
        """The episode's kept sets, token by token; None if no turn brought any (an engine that
        reports raw logprobs records none)."""
        if not self.captured:
            return None
        return KeptSets.joined(self.kept_sets)


class EnvRunner:
    def __init__(
        self,
        new_environment: EnvFactory,
        tokenizer,
        sampling: SamplingConfig,
        limits: EpisodeLimits,
        timeout_s: float,
        turn_batch_wait_s: float = EnvConfig.turn_batch_wait_s,
        session_limit: AbstractAsyncContextManager | None = None,
    ):
        self.new_environment = new_environment
        self.session_limit = session_limit
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.limits = limits
        self.timeout_s = timeout_s
        self.turn_batch_wait_s = turn_batch_wait_s  # what the TurnBatcher of its episodes waits
        self.policy_seats = 1  # an episode's completions (a SeatRunner's: one per policy seat)

    def metrics(self) -> dict[str, float]:
        """Nothing of its own (a SeatRunner's: a snapshot's and a rival's figures)."""
        return {}

    async def play(self, prompt: Prompt, generate: GenerateOne, sampling: SamplingConfig | None = None) -> Completion:
        """One episode from `prompt`, each model turn sampled by `generate` (with `sampling`, by
        default the runner's: evaluation samples with its own)."""
        async with self.open_episode() as env:
            return await self._play(env, prompt, generate, sampling or self.sampling)

    @asynccontextmanager
    async def open_episode(self) -> AsyncIterator[Environment]:
        """A new environment for one episode, held within the session limit, closed after (its
        optional `close()`) however the episode ends."""
        async with self.session_limit or nullcontext():
            env = self.new_environment()
            try:
                yield env
            finally:
                close = getattr(env, "close", None)
                if close is not None:
                    await self._call(close)

    async def _play(
        self, env: Environment, prompt: Prompt, generate: GenerateOne, sampling: SamplingConfig
    ) -> Completion:
        first = await self._first_observation(env, prompt)
        transcript = Transcript()
        reward, turns, finish, answer = 0.0, 0, "done", None
        while True:
            budget = self._turn_budget(len(first), len(transcript.token_ids))
            turn_sampling = replace(sampling, max_tokens=budget, min_tokens=min(sampling.min_tokens, budget))
            completion = await generate(first + transcript.token_ids, turn_sampling)
            transcript.add_turn(completion)
            turn = ModelTurn(completion.text, completion.token_ids, completion.finish_reason, turns)
            turns += 1
            step = checked_step(await self._call(env.step, turn))
            reward += step.reward
            if step.done:
                answer = step.answer
                break
            if turns == self.limits.max_turns:
                finish = "max_turns"
                break
            observation = self._observation_ids(step.observation)
            if self._turn_budget(len(first), len(transcript.token_ids) + len(observation)) < 1:
                finish = "max_episode_tokens"  # no room left for the model to answer it
                break
            transcript.add_observation(observation)
        return Completion(
            prompt_ids=first,
            token_ids=transcript.token_ids,
            logprobs=transcript.logprobs,
            versions=transcript.versions,
            text=self.tokenizer.decode(transcript.token_ids, skip_special_tokens=True),
            finish_reason=finish,
            turns=turns,
            env_reward=reward,
            answer=answer,
            routes=transcript.routes,  # an episode ends with a model turn
            kept_sets=transcript.joined_kept_sets(),
        )

    async def _first_observation(self, env: Environment, prompt: Prompt) -> list[int]:
        """reset()'s observation, as token ids with room left for a model turn; a drop here is
        of an episode that never reached a generator."""
        try:
            first = self._first_observation_ids(await self._call(env.reset, prompt))
            if self._turn_budget(len(first), 0) < 1:
                raise EpisodeDropped(
                    "env_error", f"reset()'s observation ({len(first)} tokens) leaves no room in the context"
                )
            return first
        except EpisodeDropped as drop:
            drop.started = False
            raise

    def _turn_budget(self, first: int, so_far: int) -> int:
        """Tokens the next model turn may take: the per-turn, per-episode and context limits."""
        limits = self.limits
        return min(self.sampling.max_tokens, limits.max_episode_tokens - so_far, limits.context - first - so_far)

    def _first_observation_ids(self, observation: Observation | None) -> list[int]:
        """The opening's ids; an opening that is none, or not text or ids, drops the episode."""
        try:
            ids = observation if not isinstance(observation, str) else prompt_token_ids(self.tokenizer, observation)
            return _token_ids(ids, self.tokenizer)
        except (TypeError, ValueError) as err:
            raise EpisodeDropped("env_error", f"reset() returned an unusable observation: {err}") from err

    def _observation_ids(self, observation: Observation | None) -> list[int]:
        try:
            return _token_ids(observation_ids(self.tokenizer, observation or []), self.tokenizer)
        except (TypeError, ValueError) as err:
            raise EpisodeDropped("env_error", f"step() returned an unusable observation: {err}") from err

    async def _call(self, method, *args):
        """env.reset/step/close: awaited with the timeout if a coroutine, else called as it is."""
        name = method.__name__
        try:
            if inspect.iscoroutinefunction(method):
                async with asyncio.timeout(self.timeout_s):
                    return await method(*args)
            return method(*args)
        except (EnvironmentFailed, EpisodeDropped):  # an environment may drop its episode by a reason of its own
            raise
        except TimeoutError as err:
            raise EpisodeDropped("env_timeout", f"{name}() took longer than env.timeout_s={self.timeout_s}") from err
        except Exception as err:
            raise EpisodeDropped("env_error", f"{name}() raised {type(err).__name__}: {err}") from err


def checked_step(step) -> EnvStep:
    if not isinstance(step, EnvStep):
        raise EpisodeDropped("env_error", f"step() returned {step!r}, not an EnvStep")
    if not isinstance(step.reward, numbers.Real) or not math.isfinite(step.reward):
        raise EpisodeDropped("env_error", f"step() returned reward {step.reward!r}, not a finite number")
    if step.answer is not None and not isinstance(step.answer, str):
        raise EpisodeDropped("env_error", f"step() returned answer {step.answer!r}, not text")
    bad = {
        seat: r for seat, r in (step.rewards or {}).items() if not isinstance(r, numbers.Real) or not math.isfinite(r)
    }
    if bad:  # a multi-seat environment's rewards (envs/seats.py)
        raise EpisodeDropped("env_error", f"step() ended with rewards {bad} that are not numbers")
    return step


def _token_ids(ids, tokenizer) -> list[int]:
    ids = list(ids)
    if not all(isinstance(i, int) and 0 <= i < len(tokenizer) for i in ids):
        raise ValueError(f"token ids must be ints in [0, {len(tokenizer)}), got {ids[:8]}...")
    return ids


class EnvironmentTask:
    """A task whose prompts are played as episodes in `env.name`'s environment: the task's prompts,
    the environment's reward (the sum of its step rewards), plus the task's own reward of the
    episode's final answer when the environment gave one."""

    def __init__(self, task: Task, new_environment: EnvFactory, tokenizer):
        self.task = task
        self.name = task.name
        self.skipped_rows = task.skipped_rows
        self.new_environment = new_environment
        self.tokenizer = tokenizer

    def sample(self, rng) -> Prompt:
        return self.task.sample(rng)

    def hold_out(self, count: int) -> list[Prompt]:
        return self.task.hold_out(count)

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        if completion.answer is None:
            return completion.played_reward
        return completion.played_reward + self.task.reward(prompt, self._said(completion.answer, prompt))

    def _said(self, answer: str, prompt: Prompt) -> Completion:
        """`answer` as a completion the model ended with EOS: what the task's reward reads."""
        ids = self.tokenizer.encode(answer, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Completion(
            prompt.token_ids, ids, [0.0] * len(ids), [ENV_TOKEN] * len(ids), answer, "stop", env_reward=0.0
        )

    def demonstration(self, prompt: Prompt) -> str:
        raise TaskError(f"env.name plays {self.name}'s prompts as episodes: there is no single completion to imitate")


def with_environment(task: Task, new_environment: EnvFactory | None, tokenizer) -> Task:
    """`task`, played in the environments `new_environment` makes (env.name's) when there are any."""
    if new_environment is None:
        return task
    return EnvironmentTask(task, new_environment, tokenizer)


def environment_factory(task: Task) -> EnvFactory | None:
    """What makes `task`'s environments (with_environment's, or its own: tool_lookup); None for
    single-turn tasks."""
    return getattr(task, "new_environment", None)


def build_env_runner(
    config: EnvConfig,
    new_environment: EnvFactory,
    tokenizer,
    sampling: SamplingConfig,
    context: int,
    session_limit: AbstractAsyncContextManager | None = None,
) -> EnvRunner:
    limits = EpisodeLimits(config.max_turns, min(config.max_episode_tokens or context, context), context)
    return EnvRunner(
        new_environment, tokenizer, sampling, limits, config.timeout_s, config.turn_batch_wait_s, session_limit
    )
