"""An environment that fails on purpose, for tests/test_environments.py's run (`env.name=
tests.flaky_environment:FlakyLookupEnv`): a module of its own, importable by the app's process."""

import asyncio
import random

from forge_async.envs.games.tool_lookup import ToolLookupEnv
from forge_async.models.tokenizer import EOS, VOCAB


class FlakyLookupEnv(ToolLookupEnv):
    """tool_lookup's environment, failing on purpose: no table for key 7 (reset raises), and for
    key 8, one call in two never comes back (an async step that hangs past env.timeout_s; the
    rest of its group waits for it)."""

    def __init__(self):
        super().__init__(VOCAB.index(EOS))

    def reset(self, prompt):
        if prompt.meta["key"] == 7:
            raise RuntimeError("no table for key 7")
        return super().reset(prompt)

    async def step(self, turn):
        if self.key == 8 and turn.index == 0 and random.random() < 0.5:
            await asyncio.sleep(3600)
        return super().step(turn)
