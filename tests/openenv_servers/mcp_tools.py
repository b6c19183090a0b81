"""A tiny OpenEnv MCP server for tests/test_openenv_schema.py: its actions are MCP tool calls
(OpenEnv's CallToolAction) to FastMCP tools, as OpenEnv's newer environments take.

    uvicorn tests.openenv_servers.mcp_tools:app

Tools: add(a, b) -> a + b; shout(text) -> TEXT. reset shows nothing (as echo_env's does).
"""

import os
from typing import Any

from forge_async.envs.openenv.server_process import SESSIONS_VARIABLE  # first: OpenEnv's web UI left out
from fastmcp import FastMCP
from openenv.core.env_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State


class ToolsEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        tools = FastMCP("tools")

        @tools.tool
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        @tools.tool
        def shout(text: str) -> str:
            """The text in capitals."""
            return text.upper()

        super().__init__(tools)
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id)
        return Observation()

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(metadata={"error": f"not a tool call: {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    ToolsEnvironment, CallToolAction, CallToolObservation, env_name="mcp_tools",
    max_concurrent_envs=int(os.environ.get(SESSIONS_VARIABLE, "16")),
)  # fmt: skip
