"""An agent program whose episodes never end, for tests/test_stopping.py (`env.name=agent:tests.stalled_agent:play`
with its timeouts raised): a run on it stalls without a single drop, as one whose environment or generator stops
answering does."""

import asyncio


async def play(prompt, base_url: str) -> float:
    await asyncio.Event().wait()  # never set
    return 0.0
