"""An environment that fails on purpose, for tests/test_environments.py's run (`env.name=
tests.flaky_environment:FlakyLookupEnv`): a module of its own, importable by the app's process."""

import asyncio

from forge_async.envs.tool_lookup import ToolLookupEnv
from forge_async.models.tokenizer import EOS, VOCAB


class FlakyLookupEnv(ToolLookupEnv):
    """tool_lookup's environment, failing on purpose: no table for key 7 (reset raises), and the
    answer to key 8 never comes back (an async step that hangs past env.timeout_s)."""

    def __init__(self):
        super().__init__(VOCAB.index(EOS))

    def reset(self, prompt):
        if prompt.meta["key"] == 7:
            raise RuntimeError("no table for key 7")
        return super().reset(prompt)

    async def step(self, turn):
        if self.key == 8 and turn.index == 1:
            await asyncio.sleep(3600)
        return super().step(turn)
