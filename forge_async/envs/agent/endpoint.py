"""The OpenAI-compatible endpoint agents talk to: one HTTP server per process that plays
agent episodes (the controller, or each environment proc with env.procs >= 1).

Each episode has a session, and its agent gets the session's base URL:

    http://127.0.0.1:PORT/sessions/<session id>/v1     (POST .../chat/completions, GET .../models)

Session ids are random (128 bits), so one episode's agent cannot reach another's by
guessing. A malformed request is answered with an OpenAI-style error (4xx, with
`error.message` naming what is wrong); nothing a client sends stops the server.
"""

import asyncio
import json
import logging
import uuid

from aiohttp import web

from forge_async.envs.agent.config import AgentConfig
from forge_async.envs.agent.conversation import HistoryEdited, UnreadableRequest
from forge_async.envs.agent.session import AgentSession, SessionBusy, SessionEnded

SERVED_MODEL = "policy"  # what GET /models lists; a request may name any model


class AgentEndpoint:
    def __init__(self, config: AgentConfig):
        self.config = config
        self.sessions: dict[str, AgentSession] = {}
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        # vLLM's request schema validates what agents send (imported once, on first use: seconds).
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        self._schema = ChatCompletionRequest
        quiet_http_client_logs()
        app = web.Application()
        app.router.add_post("/sessions/{session}/v1/chat/completions", self._chat_completions)
        app.router.add_get("/sessions/{session}/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def open_session(self, session: AgentSession) -> str:
        """`session` served; returns its id."""
        session_id = uuid.uuid4().hex
        self.sessions[session_id] = session
        return session_id

    def base_url(self, session_id: str) -> str:
        """What the session's agent points its OpenAI client at."""
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "::", "") else self.config.host
        return f"http://{host}:{self.port}/sessions/{session_id}/v1"

    def close_session(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    async def _models(self, request: web.Request) -> web.Response:
        if request.match_info["session"] not in self.sessions:
            return _error(404, "no such session: its episode has ended, or it never existed", "not_found_error")
        return web.json_response({"object": "list", "data": [{"id": SERVED_MODEL, "object": "model"}]})

    async def _chat_completions(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.match_info["session"])
        if session is None:
            return _error(404, "no such session: its episode has ended, or it never existed", "not_found_error")
        body = await _json_body(request)
        if isinstance(body, web.Response):
            return body
        try:
            parsed = self._schema.model_validate(body)
        except Exception as err:  # pydantic's ValidationError, or a value its validators reject
            return _error(400, f"malformed chat completion request: {_first_line(err)}")
        if parsed.stream:
            return _error(400, "stream=true is not supported: send stream=false")
        if parsed.n not in (None, 1):
            return _error(400, f"n={parsed.n}: one choice a request (n=1)")
        try:
            return web.json_response(await session.ask(parsed, body["messages"], body.get("tools")))
        except (HistoryEdited, UnreadableRequest) as err:
            return _error(400, str(err))
        except SessionBusy as err:
            return _error(409, str(err), "conflict_error")
        except SessionEnded as err:
            return _error(409, f"the episode has ended ({err}): no more turns", "conflict_error")


async def _json_body(request: web.Request) -> dict | web.Response:
    """The request's JSON object, or the 400 response saying why there is none."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return _error(400, f"the request body is not JSON: {err}")
    if not isinstance(body, dict):
        return _error(400, f"the request body is a JSON {type(body).__name__}, not an object")
    return body


def quiet_http_client_logs() -> None:
    """httpx (the `openai` package's HTTP client) logs every request at INFO: thousands of lines
    a minute in the run's logs. Warnings and errors still show."""
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    """An OpenAI-style error response."""
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def _first_line(err: Exception) -> str:
    return " ".join(str(err).split("\n")[:3])


# This process's endpoint, by event loop (a test may run several loops one after another).
_endpoints: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}


async def shared_endpoint(config: AgentConfig) -> AgentEndpoint:
    """This process's endpoint, started on first use."""
    loop = asyncio.get_running_loop()
    if loop not in _endpoints:
        _endpoints[loop] = loop.create_task(_started(AgentEndpoint(config)))
    return await asyncio.shield(_endpoints[loop])  # one episode's timeout must not cancel the start


async def _started(endpoint: AgentEndpoint) -> AgentEndpoint:
    await endpoint.start()
    return endpoint


async def stop_shared_endpoint() -> None:
    """Stop this process's endpoint, if it started one."""
    starting = _endpoints.pop(asyncio.get_running_loop(), None)
    if starting is not None and starting.done() and not starting.cancelled() and starting.exception() is None:
        await starting.result().stop()
