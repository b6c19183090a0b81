"""env.*: the environment of multi-turn episodes, and the settings of each kind (docs/environments.md)."""

from dataclasses import dataclass, field
from typing import Any

from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, POSITIVE, check_range
from forge_async.envs.agent.config import AgentConfig
from forge_async.errors import ConfigError


@dataclass
class OpenEnvConfig:
    """env.name=openenv: episodes on an OpenEnv environment server (envs/openenv/)."""

    url: str | None = None  # a server you run (http://host:port); or:
    app: str | None = None  # "module:app": the run serves it itself on 127.0.0.1 (uvicorn), stopped after
    workers: int = 1  # uvicorn worker processes serving app= (a pure-Python server is GIL-bound)
    startup_timeout_s: float = 60.0  # longest the server's /health may take to answer at start
    # Sessions the run holds on the server at once; null: learned from the server at start
    # (envs/openenv/capacity.py). Episodes wait for a free session.
    max_sessions: int | None = None
    session_wait_s: float = 600.0  # longest an episode waits for a free session (then openenv_session_wait)
    # A session the server refuses all the same (at capacity) is asked for again, backing off,
    # for this long; then its episode is dropped (openenv_refused). Within env.timeout_s.
    refused_retry_s: float = 10.0
    # Merged into reset()'s arguments; a string value "{seed}", "{text}", "{answer}" or
    # "{meta.KEY}" takes that field of the task's prompt (envs/openenv/reset_arguments.py).
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    # The action field the model's turn text is sent in; null: the one required string or number
    # field of the action schema the server publishes (envs/openenv/schema.py).
    action_field: str | None = None
    token_ids_field: str | None = None  # also send the turn's token ids in this action field; null: not
    # The observation field the model sees (text or token ids); null: the observation rendered to
    # text (envs/openenv/rendering.py).
    observation_field: str | None = None
    render: str | None = None  # "module:function": observation (a dict) -> the text the model sees
    action: str | None = None  # "module:function": (turn text, action schema) -> the action (a dict)
    tool_parser: str = "hermes"  # a server whose actions are MCP tool calls: the vLLM parser reading them

    def check(self) -> None:
        if (self.url is None) == (self.app is None):
            raise ConfigError(
                "env.name=openenv needs exactly one of env.openenv.url (a server you run) and "
                f"env.openenv.app (module:app, served by the run); got url={self.url} app={self.app}"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(f"env.openenv.url={self.url}: must start with http://, https://, ws:// or wss://")
        if self.app is not None and len(self.app.split(":")) != 2:
            raise ConfigError(f"env.openenv.app={self.app}: must be module:app, e.g. my_package.server:app")
        check_range("env.openenv.workers", self.workers, AT_LEAST_1)
        check_range("env.openenv.startup_timeout_s", self.startup_timeout_s, POSITIVE)
        check_range("env.openenv.max_sessions", self.max_sessions, AT_LEAST_1, nullable=True, note="null = probed")
        check_range("env.openenv.session_wait_s", self.session_wait_s, POSITIVE)
        check_range("env.openenv.refused_retry_s", self.refused_retry_s, AT_LEAST_0)
        _check_custom("render", self.render, "observation_field", self.observation_field)
        _check_custom("action", self.action, "action_field", self.action_field)


def _check_custom(key: str, function: str | None, field_key: str, field_name: str | None) -> None:
    """env.openenv.render or .action: a module:function, not set with the field it replaces."""
    if function is None:
        return
    if field_name is not None:
        raise ConfigError(f"env.openenv.{key} and env.openenv.{field_key} are both set: set one")
    if len(function.split(":")) != 2:
        raise ConfigError(f"env.openenv.{key}={function}: must be module:function")


@dataclass


class TextArenaConfig:
    """env.textarena: how env.name=textarena:GAME plays its game (envs/textarena.py)."""

    # The game's constructor arguments, over those its id registers, e.g. {max_number: 9, max_turns: 4}
    # for GuessTheNumber-v0.
    game_kwargs: dict[str, Any] = field(default_factory=dict)
    # Put a turn with no square bracket in one, "7" -> "[7]", as TextArena's own default variants
    # do; false: the turn's text is the action as it is.
    bracket_actions: bool = False
    # Allow games that call a hosted model (TwentyQuestions-v0, GuessWho-v0: a game master over
    # OpenRouter, with its API key); false: offline games only.
    online: bool = False


@dataclass
class EnvConfig:
    # "module:callable" returning a new Environment per episode, "openenv" (an OpenEnv server;
    # env.openenv.*), textarena:GAME (a single-player TextArena game; env.textarena.*) or
    # "agent:module:function" (an async agent program driving each episode through an OpenAI
    # client; env.agent.*); null: the task's own (task.name=tool_lookup has one), or none
    # (single-turn episodes).
    name: str | None = None
    max_turns: int = 4  # model turns per episode; an episode that reaches it ends there
    # Tokens after the prompt (model turns + observations); null: as many as the context holds.
    max_episode_tokens: int | None = None
    # Longest an async reset/step may take; past it the episode is dropped (env_timeout).
    timeout_s: float = 30.0
    # Longest a model turn waits for the other episodes of its rollout worker to ask for
    # theirs, so that they go to the generator as one call (rollout/turn_batcher.py).
    turn_batch_wait_s: float = 0.02
    # 0: environments run in the controller; n: on n procs of their own (EnvironmentHost
    # actors, roles environment0..n-1), episodes spread over them.
    procs: int = 0
    openenv: OpenEnvConfig = field(default_factory=OpenEnvConfig)  # env.name=openenv's server
    agent: AgentConfig = field(default_factory=AgentConfig)
    textarena: TextArenaConfig = field(default_factory=TextArenaConfig)

    def __post_init__(self) -> None:
        check_range("env.max_turns", self.max_turns, AT_LEAST_1)
        check_range(
            "env.max_episode_tokens", self.max_episode_tokens, AT_LEAST_1,
            nullable=True, note="null = the context",
        )
        check_range("env.timeout_s", self.timeout_s, POSITIVE)
        check_range("env.turn_batch_wait_s", self.turn_batch_wait_s, AT_LEAST_0)
        check_range("env.procs", self.procs, AT_LEAST_0, note="0 = in the controller")
        if self.name == "openenv":
            self.openenv.check()
            if self.openenv.refused_retry_s >= self.timeout_s:
                raise ConfigError(
                    f"env.openenv.refused_retry_s={self.openenv.refused_retry_s:g} must be below "
                    f"env.timeout_s={self.timeout_s:g}, which bounds the whole reset() it retries within"
                )
