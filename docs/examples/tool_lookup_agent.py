"""tool_lookup as an agent program (docs/environments.md): a plain `openai` client drives each
episode through forge_async's endpoint. Runnable from the repository root:

    python -m apps.grpo --config-name tool_lookup env.name=agent:docs.examples.tool_lookup_agent:play

The agent asks the model for a lookup call, answers it from the prompt's hidden table as a
`tool` message, asks for the answer, and returns the reward tool_lookup's own environment
would give (forge_async/tasks/tool_lookup.py): the same rewards, and, with the tiny model's
digit tokenizer, the same tokens.
"""

import asyncio
import weakref

from openai import AsyncOpenAI

from forge_async.tasks.task import Prompt
from forge_async.tasks.tool_lookup import ANSWER_REWARD, CALL_FORMAT_REWARD, ECHO_REWARD, KEY_REWARD


# One client per event loop (a process has one): setting up a client's HTTP pool costs ~100 ms.
_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI]" = weakref.WeakKeyDictionary()


def client_for(base_url: str) -> AsyncOpenAI:
    """The loop's client, pointed at this episode's `base_url` (its HTTP connections shared)."""
    loop = asyncio.get_running_loop()
    if loop not in _clients:
        _clients[loop] = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    return _clients[loop].with_options(base_url=base_url)


async def play(prompt: Prompt, base_url: str) -> float:
    key, table = prompt.meta["key"], prompt.meta["table"]
    client = client_for(base_url)
    messages = [{"role": "user", "content": str(key)}]
    call = await _turn(client, messages)
    if not (call.finish_reason == "stop" and len(call.message.content) == 1 and call.message.content.isdigit()):
        return 0.0  # a malformed call ends the episode
    called = int(call.message.content)
    reply = str(table[called])
    messages += [{"role": "assistant", "content": call.message.content}, {"role": "tool", "content": reply}]
    answer = await _turn(client, messages)
    reward = CALL_FORMAT_REWARD + (KEY_REWARD if called == key else 0.0)
    return reward + ECHO_REWARD * _digit_reward(reply, answer) + ANSWER_REWARD * _digit_reward(str(table[key]), answer)


async def _turn(client: AsyncOpenAI, messages: list[dict]):
    """The model's next turn (the run's sampling settings apply; the model name is not checked)."""
    response = await client.chat.completions.create(model="policy", messages=messages)
    return response.choices[0]


def _digit_reward(digit: str, choice) -> float:
    """1 for the digit then the end of the turn, 0.5 for the digit followed by more, 0 otherwise."""
    text = choice.message.content or ""
    if not text.startswith(digit):
        return 0.0
    return 1.0 if text == digit and choice.finish_reason == "stop" else 0.5
