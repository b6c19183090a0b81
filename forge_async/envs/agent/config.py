"""env.agent.*: the endpoint that agent programs (env.name=agent:module:function) talk to."""

from dataclasses import dataclass

from forge_async.config.checks import POSITIVE, Range, check_range

AGENT_PREFIX = "agent:"  # env.name=agent:module:function


@dataclass
class AgentConfig:
    # Where the endpoint listens. 127.0.0.1: only programs on this host can reach it (docs/environments.md).
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (one endpoint per process that plays episodes)
    # A vLLM tool parser ("hermes", "llama3_json", ...) that turns the model's text into OpenAI
    # tool calls when a request offers tools; null: replies are plain text.
    tool_parser: str | None = None
    # Longest an episode may take from the agent's start to its return; past it: agent_timeout.
    episode_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        check_range("env.agent.port", self.port, Range(0, 65535), note="0 = any free port")
        check_range("env.agent.episode_timeout_s", self.episode_timeout_s, POSITIVE)
