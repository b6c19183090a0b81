"""env.name=openenv: episodes on an OpenEnv environment server (docs/environments.md).

    env.openenv.url=http://host:port     a server you run, anywhere this host can reach
    env.openenv.app=module:app           served by the run on 127.0.0.1 (server_process.py)

`openenv_environments` yields the factory of one session per episode (client.py) with
the server up for the block: checked at start (a server that never answers fails there,
naming its URL), started and stopped by the run for app=. Once it is up, the sessions it
holds at once are learned (capacity.py; or env.openenv.max_sessions) and said in one line;
the run holds no more than that at once.
"""

import asyncio
import importlib.util
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from forge_async.config.callables import load_callable
from forge_async.observability.console import since_launch
from forge_async.envs.config import EnvConfig, OpenEnvConfig
from forge_async.envs.openenv.capacity import Capacity, SessionLimit, probe_capacity
from forge_async.envs.openenv.client import OpenEnvSessions
from forge_async.envs.openenv.reset_arguments import check_reset_kwargs
from forge_async.envs.openenv.schema import action_form
from forge_async.envs.openenv.startup import ready_sessions
from forge_async.envs.openenv.server_process import ServerProcess, wait_for_server
from forge_async.errors import ConfigError


def check_openenv(config: OpenEnvConfig) -> None:
    """Before any proc starts: url='s server answers, and its actions take a turn (schema.py), or
    app='s module exists; env.openenv.render and .action name functions; env.openenv.reset_kwargs
    refers to fields a prompt has."""
    check_reset_kwargs(config.reset_kwargs)
    for custom in ("render", "action"):
        if getattr(config, custom) is not None:
            load_callable(getattr(config, custom), f"env.openenv.{custom}")
    if config.url is not None:
        wait_for_server(config.url, config.startup_timeout_s)
        action_form(config.url, config, None, config.startup_timeout_s)
        return
    module = config.served_app.split(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ConfigError(f"env.openenv.app={config.app}: no module {module} to serve")


@asynccontextmanager
async def openenv_environments(
    config: EnvConfig, eos_token_id: int | None, sessions: int, log_dir: Path | None = None,
    tokenizer=None, context: int | None = None,
) -> AsyncIterator[OpenEnvSessions]:  # fmt: skip
    """The factory of OpenEnv episodes, its server up for the block. `sessions`: the episodes
    the run may play at once, the sessions an app= server is told to accept; its log goes to
    `log_dir` (default: a temporary directory). The server's actions are read, and its opening
    checked against the model's `context` (startup.py; MCP tool calls need the `tokenizer`)."""
    openenv = config.openenv
    if openenv.url is not None:
        limit = await session_limit(openenv, openenv.url, sessions, processes=1)
        sessions_at = OpenEnvSessions(
            openenv.url, openenv, eos_token_id, config.timeout_s, session_limit=limit, seats=len(config.seats)
        )
        yield await ready_sessions(sessions_at, tokenizer, context)
        return
    log_path = Path(log_dir or tempfile.mkdtemp(prefix="openenv-")) / "openenv_server.log"
    server = ServerProcess(openenv.served_app, openenv.workers, sessions, log_path)
    try:
        server.start()
        await asyncio.to_thread(server.wait_until_up, openenv.startup_timeout_s)
        print(
            f"{since_launch()} OpenEnv server {openenv.app} up at {server.url} "
            f"(uvicorn workers: {openenv.workers}, sessions a worker: {sessions}; log {log_path})",
            flush=True,
        )
        limit = await session_limit(openenv, server.url, sessions, processes=openenv.workers)
        served = OpenEnvSessions(
            server.url, openenv, eos_token_id, config.timeout_s, server.started.pid, limit, seats=len(config.seats)
        )
        yield await ready_sessions(served, tokenizer, context)
    finally:
        await asyncio.to_thread(server.stop)


async def session_limit(config: OpenEnvConfig, url: str, in_flight: int, processes: int) -> SessionLimit:
    """The run's bound on its sessions at `url`: env.openenv.max_sessions, or the capacity probed
    (that of one server process, times the `processes` serving it); said in one line."""
    capacity = await server_capacity(config, url, in_flight, processes)
    bound = min(capacity.sessions, in_flight)
    plural = "" if capacity.sessions == 1 else "s"
    bounds = (
        f"{bound} of the run's {in_flight} episodes in flight play at once, the others wait for a session "
        f"(at most env.openenv.session_wait_s={config.session_wait_s:g}s)"
        if bound < in_flight
        else f"each of the run's {in_flight} episodes in flight has one"
    )
    print(
        f"{since_launch()} OpenEnv server at {url}: {'at least ' if capacity.at_least else ''}"
        f"{capacity.sessions} session{plural} at a time "
        f"({capacity.source}): {bounds}",
        flush=True,
    )
    return SessionLimit(bound, config.session_wait_s, url)


async def server_capacity(config: OpenEnvConfig, url: str, in_flight: int, processes: int) -> Capacity:
    if config.max_sessions is not None:
        return Capacity(config.max_sessions, "env.openenv.max_sessions")
    per_process = await probe_capacity(url, in_flight + 1, config.startup_timeout_s)
    if per_process is None:
        return Capacity(in_flight + 1, "probed: none refused", at_least=True)
    where = "probed" if processes == 1 else f"probed: {per_process} a worker x {processes} uvicorn workers"
    return Capacity(per_process * processes, where)
