"""One episode on an OpenEnv server, as our Environment: a session over its WebSocket.

OpenEnv's HTTP /reset and /step build a new environment per request; only a WebSocket
(`/ws`, driven by OpenEnv's GenericEnvClient) holds one environment for a whole
episode. Each episode opens its own connection, and closes it however the episode ends.

    reset(prompt)  -> client.reset(prompt=<its text>, meta=<its meta>, seed=..., eos_token_id=...,
                                   **env.openenv.reset_kwargs)
    step(turn)     -> client.step(<the turn as an action, in the form of the server's schema>)
    observation    <- the reply's observation rendered to text (rendering.py), or a field of it
    reward, done   <- the reply's reward (None counts 0) and done

With `env.seats` the server's game has several players (OpenEnv's textarena_env with
TEXTARENA_NUM_PLAYERS): each observation names the seat that moves next
(env.openenv.seat_field), rendered for that seat as it has seen the game so far, and at the
game's end each seat's reward is read from the session's state (env.openenv.seat_rewards): the
reply's one reward is only one player's.

A server's reset receives the keywords its signature names (OpenEnv drops the rest).
The seed is drawn from the prompt, so the episodes of one group meet the same
environment. The run holds no more sessions at once than the server does (capacity.py); a
session refused all the same is asked for again, backing off, for env.openenv.refused_retry_s,
then its episode is dropped (openenv_refused). A server that drops the connection or answers
with an error drops the episode (EpisodeDropped, openenv_<reason>); the run goes on. A server
the run serves that is gone for good (its port refuses connections, or its process exited)
ends the run (EnvironmentFailed),
rather than leaving it to drop every episode from then on.
"""

import asyncio
import json
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import psutil
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from forge_async.envs.environment import EnvStep, ModelTurn, Observation, SeatTurn

from forge_async.envs.config import OpenEnvConfig
from forge_async.envs.openenv.actions import ActionForm, NoAction, opening
from forge_async.envs.openenv.rendering import ObservationText
from forge_async.envs.openenv.capacity import CAPACITY_REACHED, SessionLimit, SessionRefused
from forge_async.envs.openenv.reset_arguments import reset_arguments
from forge_async.envs.remote import EnvironmentFailed
from forge_async.envs.runner import EpisodeDropped
from forge_async.tasks.task import Prompt

# openenv.core imports OpenEnv's optional Gradio web UI (off unless ENABLE_WEB_INTERFACE) with the
# rest: seconds of CPU in every process that imports it, each server worker included (the repo's
# servers import this package first). Marked missing, it is left out: OpenEnv catches the
# ModuleNotFoundError.
sys.modules.setdefault("gradio", None)  # type: ignore[arg-type]  # None: importlib's "missing" mark
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

# OpenEnv's client raises RuntimeError("Server error: <message> (code: <CODE>)") for an error reply.
_ERROR_CODE = re.compile(r"\(code: (\w+)\)\s*$")
_FACTORY_ERROR = "FACTORY_ERROR"  # the server's environment factory failed: no session, counted as refused
_CLOSE_WAIT_S = 5.0
_FIRST_BACKOFF_S, _LONGEST_BACKOFF_S = 0.05, 1.0  # between tries of a refused session
_EXIT_WAIT_S = 2.0


class _SessionClient(GenericEnvClient):
    """OpenEnv's GenericEnvClient, ending a session the way its server expects: a `close` message,
    then the server closes the WebSocket. (The stock client closes its end at once, and the server,
    closing a socket already gone, logs a traceback for every episode.)"""

    _ws: Any  # the base class's WebSocket (openenv is untyped); None once disconnected

    async def disconnect(self) -> None:
        if self._ws is None:
            return
        try:
            await self._send({"type": "close"})
            async with asyncio.timeout(_CLOSE_WAIT_S):
                await self._ws.wait_closed()
        except (TimeoutError, ConnectionClosed, OSError):
            pass  # gone already, or slow to go: closed from this end below
        finally:
            await self._ws.close()
            self._ws = None


@dataclass(frozen=True)
class OpenEnvSessions:
    """The factory of a run's OpenEnv episodes: plain data, so it pickles to environment procs
    (env.procs)."""

    url: str
    config: OpenEnvConfig
    eos_token_id: int | None
    timeout_s: float  # env.timeout_s: the client's own wait for a reply
    server_pid: int | None = None  # the server the run serves (app=), on this host
    # The sessions the run holds at once (capacity.py), kept by the controller's runner
    session_limit: SessionLimit | None = None

    actions: ActionForm | None = None  # how a turn becomes an action (schema.py); set at start
    seats: int = 0  # the players of a multi-player game (env.seats); 0: one

    def __call__(self) -> "OpenEnvEpisode":
        return OpenEnvEpisode(self)

    @property
    def action_form(self) -> ActionForm:
        """`actions`, which the run reads from the server before any episode (startup.py)."""
        if self.actions is None:
            raise RuntimeError("the server's actions are not read yet: ready_sessions reads them first")
        return self.actions


class OpenEnvEpisode:
    def __init__(self, sessions: OpenEnvSessions):
        self.config = sessions.config
        self.sessions = sessions
        self.client = _SessionClient(
            base_url=sessions.url, connect_timeout_s=sessions.timeout_s, message_timeout_s=sessions.timeout_s
        )
        self.observation_text = ObservationText(self.config)
        self.seat_texts: dict[int, ObservationText] = {}  # each seat's, as it has seen the game (env.seats)

    async def reset(self, prompt: Prompt) -> Observation | SeatTurn:
        seed = zlib.crc32(json.dumps([prompt.text, prompt.meta], sort_keys=True, default=str).encode())
        arguments = {
            "prompt": prompt.text,
            "meta": prompt.meta,
            "seed": seed,
            "eos_token_id": self.sessions.eos_token_id,
        }
        reply = await self._call("reset", **arguments | reset_arguments(self.config.reset_kwargs, prompt, seed))
        if self.sessions.seats:
            return self._seat_turn(reply.observation)
        # A server whose opening shows nothing (an MCP server's): the task's prompt opens the episode.
        return opening(self.sessions.actions, self.observation_text(reply.observation) or prompt.text)

    async def step(self, turn: ModelTurn) -> EnvStep:
        action = self.sessions.action_form.action(turn)
        if isinstance(action, NoAction):  # not an action of the server's: the episode ends (actions.py)
            return EnvStep(done=True, answer=action.answer)
        reply = await self._call("step", action)
        if self.sessions.seats:
            return await self._seat_step(reply)
        return EnvStep(self.observation_text(reply.observation), float(reply.reward or 0.0), bool(reply.done))

    async def close(self) -> None:
        await self.client.close()

    def _seat_turn(self, observation: dict) -> SeatTurn:
        """The seat the observation names, and what that seat sees new."""
        seat = _named_seat(observation, self.config.seat_field, self.sessions.seats)
        text = self.seat_texts.setdefault(seat, ObservationText(self.config))
        return SeatTurn(seat, text(observation))

    async def _seat_step(self, reply) -> EnvStep:
        if not reply.done:
            turn = self._seat_turn(reply.observation)
            return EnvStep(turn.observation, seat=turn.seat)
        state = await self._call("state")
        return EnvStep(done=True, rewards=_seat_rewards(state, self.config.seat_rewards, self.sessions.seats))

    async def _call(self, method: str, *args, **kwargs):
        """The client's reset/step, its failures as drops by reason; a session refused at reset is
        asked for again, backing off, until env.openenv.refused_retry_s has passed since the first
        refusal."""
        clock = asyncio.get_running_loop()
        deadline, backoff_s = None, _FIRST_BACKOFF_S
        while True:
            try:
                return await self._call_once(method, *args, **kwargs)
            except SessionRefused as refusal:
                deadline = deadline or clock.time() + self.config.refused_retry_s
                if clock.time() + backoff_s > deadline:
                    raise EpisodeDropped(
                        "openenv_refused", f"{refusal}; refused for env.openenv.refused_retry_s="
                        f"{self.config.refused_retry_s:g}s",
                    ) from None  # fmt: skip
                await self.client.disconnect()  # the next try opens a new session
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, _LONGEST_BACKOFF_S)

    async def _call_once(self, method: str, *args, **kwargs):
        try:
            return await getattr(self.client, method)(*args, **kwargs)
        except ConnectionError as err:  # the WebSocket could not be opened
            if self.sessions.server_pid is not None and (
                isinstance(err.__cause__, ConnectionRefusedError) or await _exits(self.sessions.server_pid)
            ):  # nothing listens on the port of the run's own server (it never stops listening while it lives)
                raise EnvironmentFailed(
                    f"the OpenEnv server the run serves at {self.sessions.url} is gone (pid "
                    f"{self.sessions.server_pid}; its log: logs/openenv_server.log in the run dir)"
                ) from None
            raise EpisodeDropped("openenv_unreachable", f"OpenEnv {method}(): {err}") from err
        except ConnectionClosed as err:
            # A server at capacity accepts the WebSocket, says so and closes it normally: the episode's
            # first message may find it closed so. Any other close is a disconnect.
            if method == "reset" and err.rcvd is not None and err.rcvd.code == CloseCode.NORMAL_CLOSURE:
                raise SessionRefused(
                    f"OpenEnv server {self.sessions.url} ended the session before reset() "
                    "(as a server at max_concurrent_envs does)"
                ) from err
            raise EpisodeDropped(
                "openenv_disconnected", f"OpenEnv server {self.sessions.url} closed the session at {method}(): {err}"
            ) from err
        except RuntimeError as err:
            code = _ERROR_CODE.search(str(err))
            if code is None:
                raise
            if code.group(1) == CAPACITY_REACHED:
                raise SessionRefused(f"OpenEnv {method}() at {self.sessions.url}: {err}") from err
            reason = "openenv_refused" if code.group(1) == _FACTORY_ERROR else "openenv_error"
            raise EpisodeDropped(reason, f"OpenEnv {method}() at {self.sessions.url}: {err}") from err


def _named_seat(observation: dict, field: str, seats: int) -> int:
    """The seat `field` of the observation names, or the episode drops (openenv_error)."""
    seat = observation.get(field)
    if isinstance(seat, bool) or not isinstance(seat, int) or not 0 <= seat < seats:
        raise EpisodeDropped(
            "openenv_error",
            f"the OpenEnv observation's {field!r} (env.openenv.seat_field) is {seat!r}, not one of the "
            f"{seats} seats of env.seats; the observation has {sorted(observation)}",
        )
    return seat


def _seat_rewards(state: dict, path: str, seats: int) -> dict[int, float]:
    """Each seat's reward, from the mapping at the dotted `path` of the session's state (its keys
    numbers or their text, as JSON gives them), or the episode drops (openenv_error)."""
    found: Any = state  # any JSON value on the way down
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    try:
        rewards = {int(seat): float(reward) for seat, reward in found.items()}
    except (AttributeError, TypeError, ValueError):
        rewards = None
    if rewards is None or set(rewards) != set(range(seats)):
        raise EpisodeDropped(
            "openenv_error",
            f"the OpenEnv session's state at the game's end has at {path!r} (env.openenv.seat_rewards) "
            f"{found!r}, not a reward for each of the {seats} seats of env.seats",
        )
    return rewards


async def _exits(pid: int) -> bool:
    """Whether process `pid` has exited, or does within _EXIT_WAIT_S: a dying process closes its
    sockets (so connections are refused) before it becomes a zombie."""
    deadline = asyncio.get_running_loop().time() + _EXIT_WAIT_S
    while _running(pid):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (an exited child not yet reaped is a zombie: not running)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False
