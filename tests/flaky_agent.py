"""An agent program that fails on purpose, for tests/test_agents.py's run (`env.name=
agent:tests.flaky_agent:play`): tool_lookup's documented agent, except that for key 7 it
raises after its first turn, and for key 8 it rewrites its first message in its second
request (a history edit the endpoint must catch)."""

from docs.examples import tool_lookup_agent
from docs.examples.tool_lookup_agent import client_for


async def play(prompt, base_url: str) -> float:
    key = prompt.meta["key"]
    if key not in (7, 8):
        return await tool_lookup_agent.play(prompt, base_url)
    client = client_for(base_url)
    first = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": str(key)}])
    if key == 7:
        raise RuntimeError("the agent's own tool crashed")
    edited = [
        {"role": "user", "content": "9"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "tool", "content": "1"},
    ]
    await client.chat.completions.create(model="policy", messages=edited)
    return 1.0
