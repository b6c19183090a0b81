"""Custom reward functions for the scoring tier (docs/scoring.md), runnable from the repository root:

    python -m apps.grpo 'scorers=[{kind:reward},{kind:reward,fn:"docs.examples.custom_scorer:brevity",weight:0.1}]'

Each gets the prompt (token ids, text, the task's answer, metadata) and one
completion (token ids, text, the generator's logprobs and per-token policy
versions), and returns a number; each is logged as reward/<name>.
"""

import asyncio

from forge_async.data.episode import Completion
from forge_async.tasks.task import Prompt


def brevity(prompt: Prompt, completion: Completion) -> float:
    """1 for a one-token answer, less for each token more: a small push toward stopping early."""
    return 1.0 / len(completion.token_ids)


async def judged(prompt: Prompt, completion: Completion) -> float:
    """An async reward (a remote judge, a sandbox): awaited concurrently with the others of its call."""
    await asyncio.sleep(0)  # e.g. `await client.post(...)`
    return float(completion.text[:1] == prompt.answer)


def answer_rank(prompts: list[Prompt], completions: list[Completion]) -> list[float]:
    """A batched reward (`batched: true`): every completion of a generate call at once."""
    return [float(c.text[:1].isdigit() and c.text[:1] >= p.answer) for p, c in zip(prompts, completions)]
