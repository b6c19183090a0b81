"""Parts that fail every episode, for tests/test_stall.py's runs: a run made of them cannot progress
and must stop with one line. A module of its own, importable by the app's process."""

from forge_async.models.tokenizer import EOS, VOCAB
from forge_async.envs.games.tool_lookup import ToolLookupEnv


async def raising_agent(prompt, base_url: str) -> float:
    """env.name=agent:tests.stalling:raising_agent: an agent program that raises before its first turn."""
    raise RuntimeError("the agent's tool server is down")


class BrokenResetEnv(ToolLookupEnv):
    """env.name=tests.stalling:BrokenResetEnv: tool_lookup's environment whose reset always raises."""

    def __init__(self):
        super().__init__(VOCAB.index(EOS))

    def reset(self, prompt):
        raise ConnectionError("environment backend unreachable")


def text_reward(*_) -> str:
    """A reward function that returns text, not a number: as task.reward_fn (answer, completion text)
    or a scorer's fn (prompt, completion)."""
    return "high"
