"""An OpenEnv server the run serves itself (env.openenv.app=module:app): a real process.

    uvicorn module:app --host 127.0.0.1 --port <free> --workers N

runs in a process group of its own (its workers die with it), its output in a log
file. The run waits for its `/health` to answer, and terminates the group (then kills
it) when the run ends; a controller that ends without tidying up (a second Ctrl-C) kills
it on its way out, and one killed outright takes it along (process/child_processes.py; `start` is
called from the main thread). Only this host reaches it: loopback.

SESSIONS_VARIABLE tells the server how many WebSocket sessions a worker may hold (the
repo's servers pass it to create_app as max_concurrent_envs). The OS spreads connections
over the workers unevenly, so each worker is told the run's whole number.
"""

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from forge_async.process import child_processes
from forge_async.errors import ConfigError
from forge_async.cluster.hosts import free_port

SESSIONS_VARIABLE = "FORGE_OPENENV_SESSIONS"
LOOPBACK = "127.0.0.1"
_STOP_GRACE_S = 10.0
_POLL_S = 0.2
# uvicorn kills a worker that does not answer its supervisor's ping within this (default 5 s),
# ending its sessions: on a loaded box a busy worker is not a hung one.
_WORKER_HEALTHCHECK_S = 60


class ServerNotUp(ConfigError):
    """An OpenEnv server that did not answer its health check in time."""


class ServerProcess:
    def __init__(self, app: str, workers: int, sessions: int, log_path: Path):
        self.app, self.workers, self.sessions, self.log_path = app, workers, sessions, log_path
        self.port = free_port(LOOPBACK)
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        command = [
            sys.executable, "-m", "uvicorn", self.app, "--host", LOOPBACK, "--port", str(self.port),
            "--workers", str(self.workers), "--log-level", "warning",
            "--timeout-worker-healthcheck", str(_WORKER_HEALTHCHECK_S),
        ]  # fmt: skip
        environment = {**os.environ, SESSIONS_VARIABLE: str(self.sessions)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                child_processes.dying_with_this_process(command),
                stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True,
            )  # fmt: skip
        child_processes.register(self.process.pid)

    def wait_until_up(self, timeout_s: float) -> None:
        """Back once /health answers; ServerNotUp naming the URL and the log's tail if the process
        exits or `timeout_s` passes first."""
        try:
            wait_for_server(self.url, timeout_s, self._exited)
        except ServerNotUp as err:
            tail = " | ".join(_log_tail(self.log_path))
            raise ServerNotUp(f"env.openenv.app={self.app}: {err}; its log {self.log_path} ends: {tail}") from None

    @property
    def started(self) -> subprocess.Popen:
        """The server's process, once `start` has run."""
        if self.process is None:
            raise RuntimeError(f"the OpenEnv server for {self.url} is not started")
        return self.process

    def _exited(self) -> str | None:
        status = self.started.poll()
        return None if status is None else f"the OpenEnv server for {self.url} exited with status {status}"

    def stop(self) -> None:
        """Terminate the process group; killed if it is not gone after a grace period."""
        if self.process is None:
            return
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        child_processes.unregister(self.process.pid)


def wait_for_server(url: str, timeout_s: float, exited: Callable[[], str | None] = lambda: None) -> None:
    """Back once `url`/health answers; ServerNotUp naming the URL if it does not within `timeout_s`,
    or as soon as `exited()` says why the server is gone (None while it runs)."""
    deadline = time.monotonic() + timeout_s
    while not is_healthy(url):
        gone = exited()
        if gone is not None:
            raise ServerNotUp(gone)
        if time.monotonic() > deadline:
            raise ServerNotUp(
                f"no OpenEnv server answered {url}/health within {timeout_s:g}s (env.openenv.startup_timeout_s)"
            )
        time.sleep(_POLL_S)


def http_base(url: str) -> str:
    """The server at `url` (http(s):// or ws(s)://) as the http(s):// base its HTTP endpoints hang off."""
    return url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rstrip("/")


def is_healthy(url: str) -> bool:
    health = http_base(url) + "/health"
    try:
        with urllib.request.urlopen(health, timeout=2.0) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def _log_tail(path: Path, lines: int = 3) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines()[-lines:]]
    except OSError:
        return []
