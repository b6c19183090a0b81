"""env.*: the environment of multi-turn episodes, and the settings of each kind (docs/environments.md)."""

from dataclasses import dataclass, field
from typing import Any, Literal

from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, check_range
from forge_async.config.choices import check_choices
from forge_async.envs.agent.config import AgentConfig
from forge_async.errors import ConfigError


@dataclass
class OpenEnvConfig:
    """env.name=openenv: episodes on an OpenEnv environment server (envs/openenv/)."""

    url: str | None = key(
        None,
        help="`env.name=openenv`: a server you run; exactly one of `url` and `app`",
        accepts="`http(s)://host:port`",
    )
    app: str | None = key(
        None,
        help="`env.name=openenv`: the run serves it on 127.0.0.1 (uvicorn) and stops it at the end",
        accepts="`module:app`",
    )
    workers: int = key(1, help="uvicorn worker processes for `app`", accepts=">= 1")
    startup_timeout_s: float = key(
        60.0,
        help="the server's `/health` must answer within this at start, and the probe of its sessions finish",
        accepts="> 0",
    )
    max_sessions: int | None = key(
        None,
        help=(
            "sessions the run holds on the server at once; null: probed at start (a refused session "
            "carries the server's number; an `app` with `workers` N holds N times it) "
            "([environments.md](environments.md#openenv-sessions))"
        ),
        accepts=">= 1, or null",
    )
    session_wait_s: float = key(
        600.0,
        help=(
            "longest an episode waits for a free session; past it, dropped before it starts (`openenv_session_wait`)"
        ),
        accepts="> 0",
    )
    refused_retry_s: float = key(
        10.0,
        help=("a session refused all the same is asked for again, backing off, this long; then `openenv_refused`"),
        accepts=">= 0, below `env.timeout_s`",
    )
    reset_kwargs: dict[str, Any] = key(
        {},
        help=(
            'merged into `reset`\'s arguments; a string `"{seed}"`, `"{text}"`, `"{answer}"`, '
            '`"{meta.KEY}"` takes that field of the prompt '
            "([environments.md](environments.md#openenv-reset-arguments))"
        ),
        accepts="a mapping",
    )
    action_field: str | None = key(
        None,
        help=(
            "the action field the turn's text goes to, converted to its type (an integer: the last number "
            "in the text); null: the one required text, number, boolean or choice field of the action "
            "schema the server publishes ([environments.md](environments.md#openenv-actions))"
        ),
        accepts="a field name, or null",
    )
    token_ids_field: str | None = key(
        None,
        help="also send the turn's token ids in this action field",
        accepts="a field name, or null",
    )
    observation_field: str | None = key(
        None,
        help=(
            "the observation field shown to the model as it is (text or token ids); null: the observation "
            "rendered to text (its content fields; a message list's new messages; a tool's result)"
        ),
        accepts="a field name, or null",
    )
    render: str | None = key(
        None,
        help=(
            "the observation (a dict) -> the text the model sees, instead of the default rendering; not "
            "with `observation_field`"
        ),
        accepts="`module:function`, or null",
    )
    action: str | None = key(
        None,
        help=(
            "(the turn's text, the server's action schema) -> the action (a dict), or None: no action "
            "(the episode ends, unrewarded); not with `action_field`"
        ),
        accepts="`module:function`, or null",
    )
    seat_field: str = key(
        "current_player_id",
        help=(
            "with `env.seats`: the observation field naming the seat that moves next (an integer; "
            "OpenEnv's textarena_env's)"
        ),
        accepts="a field name",
    )
    seat_rewards: str = key(
        "raw_state.rewards",
        help=(
            "with `env.seats`: where, in the session's state at the game's end, each seat's reward is: a "
            "dotted path to a mapping seat -> reward (OpenEnv's textarena_env's)"
        ),
        accepts="a dotted path",
    )
    tool_parser: str = key(
        "hermes",
        help=("a server whose actions are MCP tool calls (`CallToolAction`): the parser that reads a turn's tool call"),
        accepts="a vLLM tool parser name",
    )

    @property
    def served_app(self) -> str:
        """`app`, for a run that serves the environment itself (no `url`)."""
        if self.app is None:
            raise ConfigError("env.name=openenv with no env.openenv.url needs env.openenv.app (module:app)")
        return self.app

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
class SnapshotConfig:
    """A `snapshot` seat (env.seats, eval.seats): the policy as it was a few steps ago, on generators of
    its own (handles/generators/snapshot.py)."""

    refresh_steps: int = key(
        10,
        help=(
            "with a `snapshot` seat: the snapshot is refreshed when the trainer publishes a multiple of this, "
            "to the version `lag` steps before; between refreshes it holds its version "
            "([multiplayer.md](multiplayer.md#a-frozen-past-self-the-snapshot-seat))"
        ),
        accepts=">= 1",
    )
    lag: int = key(
        0,
        help=(
            "with a `snapshot` seat: at each refresh the snapshot takes the version published this many steps "
            "before (each snapshot generator keeps a copy of it aside until then; 0: the newest, no copy)"
        ),
        accepts="0 to refresh_steps",
    )
    generators: int = key(
        1,
        help=(
            "with a `snapshot` seat: generator procs of the snapshot's own (vLLM engines on the trainer's "
            "node, after the trained policy's generator.count), which play its seats' turns and are left "
            "out of the trained policy's routing, admission control and evaluations"
        ),
        accepts=">= 1",
    )

    def __post_init__(self) -> None:
        check_range("env.snapshot.refresh_steps", self.refresh_steps, AT_LEAST_1)
        check_range("env.snapshot.generators", self.generators, AT_LEAST_1)
        lag = Range(0, self.refresh_steps)
        check_range("env.snapshot.lag", self.lag, lag, note=f"env.snapshot.refresh_steps={self.refresh_steps}")


@dataclass
class TextArenaConfig:
    """env.textarena: how env.name=textarena:GAME plays its game (envs/textarena.py)."""

    game_kwargs: dict[str, Any] = key(
        {},
        help=(
            "with `env.name=textarena:GAME`: over the arguments the game id registers, e.g. `{min_number: "
            "1, max_number: 9, max_turns: 4}` for `GuessTheNumber-v0`"
        ),
        accepts="the game's constructor arguments",
    )
    bracket_actions: bool = key(
        False,
        help=(
            "with `env.name=textarena:GAME`: a turn with no `[` or `]` is sent as `[turn]`, as "
            "TextArena's own default variants do; false: the turn's text as it is"
        ),
    )
    online: bool = key(
        False,
        help=(
            "with `env.name=textarena:GAME`: also games that call a hosted model (`TwentyQuestions-v0`, "
            "`GuessWho-v0`, with their API key); false: offline games only, the others refused at start"
        ),
    )


@dataclass
class EnvConfig:
    name: str | None = key(
        None,
        help=(
            "makes one Environment per episode (imported at start); `openenv`: an OpenEnv server "
            "(`env.openenv.*`); `textarena:GAME` plays a TextArena game (one player, or `env.seats`' players) "
            "([environments.md](environments.md#textarena-games)); `nim`: a built-in two-player game for "
            "`env.seats` ([multiplayer.md](multiplayer.md#a-game-the-tiny-model-learns-by-self-play-nim)); "
            "`agent:...` runs an agent program per "
            "episode "
            "([environments.md](environments.md#agent-programs-through-an-openai-compatible-endpoint)); "
            "null: the task's own (`tool_lookup`), or single-turn"
        ),
        accepts="`module:callable`, `openenv`, `textarena:GAME`, `nim`, `agent:module:function`, or null",
    )
    seats: list[str] = key(
        [],
        help=(
            "a multi-player game's seats in turn order, each `policy` (the policy trained: several make "
            "self-play), `snapshot` (the policy some steps ago: `env.snapshot.*`), `rival` (a second policy "
            "trained in the same run: `rival.*`), `random` (a move its "
            "observations show) or a `module:function` scripted player "
            "(`(observations, seat) -> move`); each policy seat's turns are a completion of their own "
            "([multiplayer.md](multiplayer.md)); []: one seat, the policy's"
        ),
        accepts="[], or two or more seats with at least one `policy`",
    )
    seat_baseline: Literal["seat", "game"] = key(
        "seat",
        help=(
            "with several `policy` seats, what a completion's advantage is relative to: `seat`, the group's "
            "completions of the same seat (a first mover against first movers); `game`, all the group's "
            "completions of the policy's seats together ([multiplayer.md](multiplayer.md))"
        ),
    )
    max_turns: int = key(
        4,
        help=(
            "model turns per episode (with `env.seats`: per policy seat); an episode that reaches it ends "
            "(`episodes/ended_max_turns`)"
        ),
        accepts=">= 1",
    )
    max_episode_tokens: int | None = key(
        None,
        help=(
            "tokens after the prompt, model turns and observations; null: the context "
            "(`episodes/ended_max_episode_tokens`)"
        ),
        accepts=">= 1, or null",
    )
    timeout_s: float = key(
        30.0,
        help="an async `reset`/`step` slower than this drops its episode (`env_timeout`)",
        accepts="> 0",
    )
    turn_batch_wait_s: float = key(
        0.02,
        help=(
            "longest a model turn waits for the other episodes of its rollout worker to ask for theirs, "
            "all going to the generator as one call "
            "([environments.md](environments.md#how-turns-reach-the-generator))"
        ),
        accepts=">= 0",
    )
    procs: int = key(
        0,
        help=(
            "0: environments run in the controller; n: on n procs of their own (EnvironmentHost actors, "
            "roles environment0..n-1), episodes spread over them"
        ),
        accepts=">= 0",
    )
    openenv: OpenEnvConfig = field(default_factory=OpenEnvConfig)  # env.name=openenv's server
    agent: AgentConfig = field(default_factory=AgentConfig)
    textarena: TextArenaConfig = field(default_factory=TextArenaConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)  # a `snapshot` seat's

    def __post_init__(self) -> None:
        check_choices(self, "env")
        check_range("env.max_turns", self.max_turns, AT_LEAST_1)
        check_range(
            "env.max_episode_tokens",
            self.max_episode_tokens,
            AT_LEAST_1,
            nullable=True,
            note="null = the context",
        )
        check_range("env.timeout_s", self.timeout_s, POSITIVE)
        check_range("env.turn_batch_wait_s", self.turn_batch_wait_s, AT_LEAST_0)
        check_range("env.procs", self.procs, AT_LEAST_0, note="0 = in the controller")
        if self.seats:
            if len(self.seats) < 2:
                raise ConfigError(f"env.seats={list(self.seats)}: one seat is the default ([]); name two or more")
            if self.name is None:
                raise ConfigError("env.seats names players of a multi-player environment: set env.name to one")
        if self.name == "openenv":
            self.openenv.check()
            if self.openenv.refused_retry_s >= self.timeout_s:
                raise ConfigError(
                    f"env.openenv.refused_retry_s={self.openenv.refused_retry_s:g} must be below "
                    f"env.timeout_s={self.timeout_s:g}, which bounds the whole reset() it retries within"
                )
