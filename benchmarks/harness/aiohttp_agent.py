"""tool_lookup's agent with a bare aiohttp client: the endpoint's cost without the `openai` client's."""

import asyncio
import weakref

import aiohttp

from docs.examples.tool_lookup_agent import lookup_episode
from forge_async.tasks.task import Prompt

_sessions: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession]" = weakref.WeakKeyDictionary()


async def play_with_aiohttp(prompt: Prompt, base_url: str) -> float:
    """tool_lookup's agent (docs/examples/tool_lookup_agent.py) with a bare HTTP client."""
    loop = asyncio.get_running_loop()
    if loop not in _sessions:
        _sessions[loop] = aiohttp.ClientSession()
    session = _sessions[loop]

    async def ask(messages: list[dict]) -> tuple[str, str]:
        async with session.post(
            f"{base_url}/chat/completions", json={"model": "policy", "messages": messages}
        ) as reply:
            choice = (await reply.json())["choices"][0]
        return choice["message"]["content"] or "", choice["finish_reason"]

    return await lookup_episode(prompt, ask)
