"""env.agent.*: the endpoint that agent programs (env.name=agent:module:function) talk to."""

from dataclasses import dataclass

from forge_async.config.keys import key
from forge_async.config.checks import POSITIVE, Range, check_range

AGENT_PREFIX = "agent:"  # env.name=agent:module:function


@dataclass
class AgentConfig:
    host: str = key(
        "127.0.0.1",
        help=(
            "where the agent endpoint listens "
            "([environments.md](environments.md#agent-programs-through-an-openai-compatible-endpoint))"
        ),
        accepts="a host address",
    )
    port: int = key(0, help="0: any free port", accepts="0-65535")
    tool_parser: str | None = key(
        None,
        help="OpenAI tool calls parsed from the model's text; null: plain text",
        accepts="a vLLM tool parser, or null",
    )
    episode_timeout_s: float = key(
        300.0,
        help="an agent episode longer than this is dropped (`agent_timeout`)",
        accepts="> 0",
    )

    def __post_init__(self) -> None:
        check_range("env.agent.port", self.port, Range(0, 65535), note="0 = any free port")
        check_range("env.agent.episode_timeout_s", self.episode_timeout_s, POSITIVE)
