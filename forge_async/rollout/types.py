"""The seams of rollouts: what generating, producing and the worker's shape are."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion, Episode

# (prompt token ids, sampling, completions per prompt) -> one group of completions per prompt
Generate = Callable[[list[list[int]], SamplingConfig, int], Awaitable[list[list[Completion]]]]
Dropped = dict[str, int]  # samples lost before the buffer, by reason
# num_prompts -> their scored episodes and the samples lost on the way
Produce = Callable[[int], Awaitable[tuple[list[Episode], Dropped]]]


@dataclass(frozen=True)
class WorkerShape:
    """How a rollout worker spends its admissions."""

    prompts_per_call: int  # prompts one produce call takes (at most, with partial_calls)
    calls_in_flight: int  # produce calls the worker keeps going at once
    partial_calls: bool = False  # a call takes as many prompts as admission has room for, at least one

    def samples_per_call(self, group_size: int) -> int:
        return self.prompts_per_call * group_size

    def least_admitted(self, group_size: int) -> int:
        """The fewest samples admission may admit for a call: one group with partial calls, else a whole call."""
        return group_size if self.partial_calls else self.samples_per_call(group_size)
