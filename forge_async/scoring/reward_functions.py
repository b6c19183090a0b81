"""Reward scorers: Python callables, run in the controller beside the rollout workers.

A reward function takes one prompt and one completion and returns a number:

    def short(prompt: Prompt, completion: Completion) -> float: ...
    async def judged(prompt: Prompt, completion: Completion) -> float: ...   # awaited concurrently

or, with `batched: true`, lists of both (every completion of a generate call) and
returns a list of numbers. Sync functions run in a worker thread, so a slow one
holds up its own rollout worker, not the trainer's loop. With `fn: null` the
scorer is the task's own reward (task.reward).
"""

import asyncio
import inspect
import math
import numbers
from collections.abc import Callable

from forge_async.data.episode import Completion
from forge_async.config.callables import load_callable
from forge_async.tasks.task import Prompt, Task
from forge_async.scoring.config import ScorerConfig
from forge_async.scoring.scorer import Score, flatten, regroup


class RewardFunction:
    """A reward callable as a Scorer; each reward is also logged as `reward/<name>`."""

    def __init__(self, config: ScorerConfig, index: int, task: Task):
        self.name = config.label
        self.batched = config.batched
        if config.fn is None:
            self.fn: Callable = task.reward
        else:
            self.fn = load_callable(config.fn, f"scorers[{index}].fn")
        self.is_async = inspect.iscoroutinefunction(self.fn)

    async def score(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[list[Score]]:
        pairs = flatten(prompts, groups)
        if self.batched:
            flat = await self._batched([p for p, _ in pairs], [c for _, c in pairs])
        elif self.is_async:
            flat = await asyncio.gather(*(self._one_async(p, c) for p, c in pairs))
        else:
            flat = await asyncio.to_thread(lambda: [self._one(p, c) for p, c in pairs])
        return regroup(flat, groups)

    def _one(self, prompt: Prompt, completion: Completion) -> Score:
        try:
            return self._scored(self.fn(prompt, completion))
        except Exception as err:
            return Score.failed(err)

    async def _one_async(self, prompt: Prompt, completion: Completion) -> Score:
        try:
            return self._scored(await self.fn(prompt, completion))
        except Exception as err:
            return Score.failed(err)

    async def _batched(self, prompts: list[Prompt], completions: list[Completion]) -> list[Score]:
        try:
            if self.is_async:
                rewards = await self.fn(prompts, completions)
            else:
                rewards = await asyncio.to_thread(self.fn, prompts, completions)
            if len(rewards) != len(completions):
                raise ValueError(f"returned {len(rewards)} rewards for {len(completions)} completions")
            return [self._scored(r) for r in rewards]
        except Exception as err:
            return [Score.failed(err)] * len(completions)

    def _scored(self, value) -> Score:
        """A returned value as a Score; anything but a finite number is an error."""
        if not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"returned {value!r}, not a finite number")
        return Score(reward=float(value), metrics={f"reward/{self.name}": float(value)})
