"""What a scorer is: it takes groups of completions and says, for each, a Score.

A scorer sees whole groups (the completions of one prompt), with the prompt
(token ids, text, the task's answer and metadata) and each completion (token ids,
text, the generator's logprobs and versions). The scoring tier (tier.py) runs
every configured scorer on each generated batch, concurrently, and combines their
Scores into episodes: rewards into the reward and its group-relative advantage,
per-token rewards into per-token advantages, reference logprobs into the KL penalty.
"""

from dataclasses import dataclass, field
from typing import Protocol

from forge_async.data.episode import Completion
from forge_async.tasks.task import Prompt
from forge_async.errors import UserError


@dataclass
class Score:
    """One scorer's verdict on one completion; a scorer fills in what it gives."""

    reward: float | None = None  # an outcome reward (reward scorers)
    token_rewards: list[float] | None = None  # per completion token, added to its advantage
    reference_logprobs: list[float] | None = None  # log pi_ref per completion token (reference_kl)
    metrics: dict[str, float] = field(default_factory=dict)  # per-episode figures, averaged per step
    error: str | None = None  # why this completion could not be scored (scoring.on_error decides)

    @classmethod
    def failed(cls, err: Exception) -> "Score":
        """The Score of a completion a scorer raised on."""
        return cls(error=f"raised {type(err).__name__}: {err}")


class Scorer(Protocol):
    name: str

    async def score(self, prompts: list[Prompt], groups: list[list[Completion]]) -> list[list[Score]]:
        """One Score per completion, in the shape of `groups` (one group per prompt)."""
        ...


class ScorerError(UserError):
    """A scorer raised on a completion (scoring.on_error=fail): names the scorer, prompt and completion."""


class ScorerFailed(RuntimeError):
    """A model scorer's proc died: the run stops (it can be resumed)."""


def flatten(prompts: list[Prompt], groups: list[list[Completion]]) -> list[tuple[Prompt, Completion]]:
    """Every (prompt, completion) pair, group after group."""
    return [(prompt, c) for prompt, group in zip(prompts, groups, strict=True) for c in group]


def regroup(flat: list, groups: list[list]) -> list[list]:
    """`flat` (one item per completion, as `flatten` ordered them) cut back into the shape of `groups`."""
    shaped, start = [], 0
    for group in groups:
        shaped.append(list(flat[start : start + len(group)]))
        start += len(group)
    return shaped
