"""tool_lookup as an agent program (docs/environments.md): a plain `openai` client drives each
episode through forge_async's endpoint. Runnable from the repository root:

    python -m apps.grpo --config-name tool_lookup env.name=agent:docs.examples.tool_lookup_agent:play

The agent asks the model for a lookup call, answers it from the prompt's hidden table as a
`tool` message, asks for the answer, and returns the reward tool_lookup's own environment
would give (forge_async/envs/games/tool_lookup.py): the same rewards, and, with the tiny model's
digit tokenizer, the same tokens. The episode (`lookup_episode`) takes any way of asking for
a turn; `play` asks with the `openai` client.
"""

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from openai import AsyncOpenAI

from forge_async.tasks.task import Prompt
from forge_async.envs.games.tool_lookup import ANSWER_REWARD, CALL_FORMAT_REWARD, ECHO_REWARD, KEY_REWARD

# messages -> the model's reply: its text and finish reason ("stop", "length", ...)
AskForTurn = Callable[[list[dict]], Awaitable[tuple[str, str]]]

# One client per event loop (a process has one): setting up a client's HTTP pool costs ~100 ms.
_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI]" = weakref.WeakKeyDictionary()


def client_for(base_url: str) -> AsyncOpenAI:
    """The loop's client, pointed at this episode's `base_url` (its HTTP connections shared)."""
    loop = asyncio.get_running_loop()
    if loop not in _clients:
        _clients[loop] = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    return _clients[loop].with_options(base_url=base_url)


async def play(prompt: Prompt, base_url: str) -> float:
    client = client_for(base_url)

    async def ask(messages: list[dict]) -> tuple[str, str]:
        # The run's sampling settings apply; the model name is not checked.
        response = await client.chat.completions.create(model="policy", messages=messages)
        choice = response.choices[0]
        return choice.message.content or "", choice.finish_reason

    return await lookup_episode(prompt, ask)


async def lookup_episode(prompt: Prompt, ask: AskForTurn) -> float:
    """One tool_lookup episode: a lookup call, the tool's reply, an answer; its reward."""
    key, table = prompt.meta["key"], prompt.meta["table"]
    messages = [{"role": "user", "content": str(key)}]
    call, finish = await ask(messages)
    if not (finish == "stop" and len(call) == 1 and call.isdigit()):
        return 0.0  # a malformed call ends the episode
    called = int(call)
    reply = str(table[called])
    messages += [{"role": "assistant", "content": call}, {"role": "tool", "content": reply}]
    answer = await ask(messages)
    reward = CALL_FORMAT_REWARD + (KEY_REWARD if called == key else 0.0)
    return reward + ECHO_REWARD * _digit_reward(reply, answer) + ANSWER_REWARD * _digit_reward(str(table[key]), answer)


def _digit_reward(digit: str, answer: tuple[str, str]) -> float:
    """1 for the digit then the end of the turn, 0.5 for the digit followed by more, 0 otherwise."""
    text, finish = answer
    if not text.startswith(digit):
        return 0.0
    return 1.0 if text == digit and finish == "stop" else 0.5
