"""How many sessions an OpenEnv server holds at once, and the run's bound on its sessions.

OpenEnv servers do not publish their capacity (create_app's max_concurrent_envs). A session
they cannot hold is accepted, answered with an error whose code is CAPACITY_REACHED and
which carries `max_sessions`, then closed. `probe_capacity` opens sessions (WebSockets that
ask for the state) up to one past what the run would hold at once, stops at the first
refusal, and closes them all. The capacity found is per server process: a server the run
serves with `env.openenv.workers=N` (uvicorn) holds N times it.

`SessionLimit` is the bound the run keeps: at most `sessions` episodes hold a session at
once, in the controller, which plays (or drives, with env.procs) every episode of the run,
training and evaluation alike. An episode waits for a free session, at most `wait_s`;
past it, it is dropped before its first model turn (openenv_session_wait). Once the first
`_MEASURED_EPISODES` episodes played to their end have given their session back, one line says
how long an episode holds one on average, and so the episodes/s the server's sessions allow at most.
"""

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from forge_async.observability.console import since_launch
from forge_async.envs.runner import EpisodeDropped
from forge_async.errors import ConfigError

CAPACITY_REACHED = "CAPACITY_REACHED"
_PROBE_WAVE = 32  # sessions opened at once while probing
_MEASURED_EPISODES = 64  # episodes whose sessions' mean hold time the run says once
_CLOSE_WAIT_S = 5.0


class ProbeFailed(ConfigError):
    """The server's capacity could not be learned: it answered a session with an error of
    another kind, or took longer than env.openenv.startup_timeout_s."""


@dataclass(frozen=True)
class Capacity:
    """What the run keeps to on one server: `sessions` at once, and where that number came from."""

    sessions: int
    source: str  # "probed", "env.openenv.max_sessions"
    at_least: bool = False  # the probe met no refusal: the server holds `sessions` or more


async def probe_capacity(url: str, most: int, timeout_s: float) -> int | None:
    """The sessions one process of the server at `url` holds (its refusal's max_sessions), or None
    if it held `most` at once. Every session opened is closed before this returns."""
    held: list[ClientConnection] = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(held) < most:
                wave = min(_PROBE_WAVE, most - len(held))
                opened = await asyncio.gather(*(_open_session(url) for _ in range(wave)), return_exceptions=True)
                held += [o for o in opened if isinstance(o, ClientConnection)]
                refusals = [o for o in opened if isinstance(o, SessionRefused)]
                failures = [o for o in opened if not isinstance(o, (ClientConnection, SessionRefused))]
                if failures:  # first: a server that cannot make a session at all also refuses past its capacity
                    raise ProbeFailed(f"probing the sessions of the OpenEnv server at {url}: {failures[0]}")
                if refusals:
                    return refusals[0].max_sessions
            return None
    except TimeoutError:
        raise ProbeFailed(
            f"probing how many sessions the OpenEnv server at {url} holds took longer than {timeout_s:g}s "
            "(env.openenv.startup_timeout_s); set env.openenv.max_sessions to skip the probe"
        ) from None
    finally:
        await asyncio.gather(*(_close_session(ws) for ws in held))


class SessionRefused(Exception):
    """A session the server did not hold (CAPACITY_REACHED): worth asking for again. `max_sessions`:
    the number its refusal carried, where it was read."""

    def __init__(self, message: str, max_sessions: int | None = None):
        super().__init__(message)
        self.max_sessions = max_sessions


async def _open_session(url: str) -> ClientConnection:
    """A session the server holds (it answered a state request), or SessionRefused."""
    # A server on this host is reached directly, whatever proxy the environment names (as OpenEnv's client does).
    loopback = any(host in url for host in ("://127.0.0.1", "://localhost"))
    ws = await connect(websocket_url(url), proxy=None if loopback else True)
    try:
        try:
            await ws.send(json.dumps({"type": "state"}))
        except ConnectionClosed:
            pass  # a refusal closes the socket at once: its error reply is still there to read
        reply = json.loads(await ws.recv())
    except BaseException:
        await ws.close()
        raise
    data: dict[str, Any] = reply.get("data") or {}
    if reply.get("type") == "error" and data.get("code") == CAPACITY_REACHED:
        await ws.close()
        raise SessionRefused(data.get("message", CAPACITY_REACHED), int(data["max_sessions"]))
    if reply.get("type") == "error" and data.get("code") != "EXECUTION_ERROR":  # state before reset may fail
        await ws.close()
        raise ProbeFailed(f"it could not open a session: {data.get('message')} (code {data.get('code')})")
    return ws


async def _close_session(ws: ClientConnection) -> None:
    """End a session the way the server expects: a `close` message, then its close."""
    try:
        await ws.send(json.dumps({"type": "close"}))
        async with asyncio.timeout(_CLOSE_WAIT_S):
            await ws.wait_closed()
    except (ConnectionClosed, OSError, TimeoutError):
        pass
    finally:
        await ws.close()


def websocket_url(url: str) -> str:
    """The /ws endpoint of the server at `url` (http(s):// or ws(s)://)."""
    base = url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return f"{base}/ws"


class SessionLimit:
    """At most `sessions` episodes hold a session at once; an episode waits `wait_s` at most.

    It travels with the episodes' factory (OpenEnvSessions) to environment procs, where it is
    not used: the controller's runner keeps the bound for every episode (envs/runner.py)."""

    def __init__(self, sessions: int, wait_s: float, url: str):
        self.sessions, self.wait_s, self.url = sessions, wait_s, url
        self._free: asyncio.Semaphore | None = None  # made in the process that uses it
        self._taken_at: dict[asyncio.Task, float] = {}  # the episode (its task) holding a session: since when
        self._held_s: list[float] = []  # how long each of the first episodes held its session

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_free": None, "_taken_at": {}}

    def _semaphore(self) -> asyncio.Semaphore:
        if self._free is None:
            self._free = asyncio.Semaphore(self.sessions)
        return self._free

    async def __aenter__(self) -> None:
        free = self._semaphore()
        try:
            async with asyncio.timeout(self.wait_s):
                await free.acquire()
        except TimeoutError:
            raise EpisodeDropped(
                "openenv_session_wait",
                f"no session of the OpenEnv server at {self.url} came free within {self.wait_s:g}s "
                f"(env.openenv.session_wait_s; the run holds {self.sessions} at once)",
                started=False,
            ) from None
        self._taken_at[_episode_task()] = time.perf_counter()

    async def __aexit__(self, failure: type[BaseException] | None, *_) -> None:
        self._semaphore().release()
        taken_at = self._taken_at.pop(_episode_task())
        if failure is None and len(self._held_s) < _MEASURED_EPISODES:  # played episodes only
            self._held_s.append(time.perf_counter() - taken_at)
            if len(self._held_s) == _MEASURED_EPISODES:
                self._say_rate()

    def _say_rate(self) -> None:
        """The one line of what the sessions allow, from the first episodes' mean hold time."""
        mean_s = sum(self._held_s) / len(self._held_s)
        plural = "" if self.sessions == 1 else "s"
        print(
            f"{since_launch()} OpenEnv server at {self.url}: an episode holds its session {mean_s:.2f}s on "
            f"average (the first {len(self._held_s)}): {self.sessions} session{plural} at once allow at most "
            f"{self.sessions / mean_s:.0f} episodes/s",
            flush=True,
        )


def _episode_task() -> asyncio.Task:
    """The task of the episode holding a session (the runner plays each episode in one)."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("an OpenEnv session is held from an episode's task, not from outside any")
    return task
