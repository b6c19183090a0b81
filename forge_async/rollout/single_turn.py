"""Single-turn rollouts: a batch of prompts -> one generate call -> the scoring tier.

Runs in the controller process, off the trainer's critical path: while the
trainer steps, rollout workers (worker.py) keep their generators busy, have what
comes back scored (forge_async/scoring/) and hand the episodes to the buffer.
This class is also the prompt source and counters that multi-turn rollouts
(multi_turn.py) build on.
"""

import random
from collections.abc import Mapping

from forge_async.generation.config import SamplingConfig
from forge_async.rollout.progress_watch import ProgressWatch
from forge_async.rollout.config import StallConfig
from forge_async.data.buffer import SCORER_ERROR, DropCounts
from forge_async.data.episode import Completion, Episode
from forge_async.tasks.task import Prompt, Task
from forge_async.rollout.types import Generator, Producer, WorkerShape
from forge_async.scoring.tier import ScoringTier


class Rollouts:
    def __init__(
        self,
        task: Task,
        scoring: ScoringTier,
        sampling: SamplingConfig,
        group_size: int,
        prompts_per_rollout: int,
        seed: int,
        partial_calls: bool = False,
        watch: ProgressWatch | None = None,
    ):
        """`prompts_per_rollout`: the prompts of one generate call. `partial_calls`: a worker's call
        may take fewer, as admission has room for (groups may be dropped on arrival). `watch` is told
        what became of every call's episodes (by default one with stall.*'s defaults)."""
        self.task = task
        self.scoring = scoring
        self.sampling = sampling
        self.group_size = group_size
        self.prompts_per_rollout = prompts_per_rollout
        self.shape = WorkerShape(prompts_per_rollout, calls_in_flight=1, partial_calls=partial_calls)
        self.rng = random.Random(seed)
        self.watch = watch or ProgressWatch(StallConfig())
        self.tokens = 0  # completion tokens produced
        self._next_group = 0

    def for_worker(self) -> Producer:
        """What one rollout worker produces with: single-turn calls need nothing of their own."""
        return self

    async def produce(self, generator: Generator, num_prompts: int) -> tuple[list[Episode], DropCounts]:
        """One generate call, scored: its episodes, and the completions lost on the way, by reason."""
        prompts = [self.task.sample(self.rng) for _ in range(num_prompts)]
        groups = await generator.generate([p.token_ids for p in prompts], self.sampling, self.group_size)
        self.tokens += sum(len(c.token_ids) for group in groups for c in group)
        episodes, dropped = await self._scored(prompts, groups)
        self._watched(episodes, dropped.by_reason())
        return episodes, dropped

    async def _scored(self, prompts: list[Prompt], groups: list[list[Completion]]) -> tuple[list[Episode], DropCounts]:
        first_group, self._next_group = self._next_group, self._next_group + len(prompts)
        episodes, unscored = await self.scoring.score(prompts, groups, first_group)
        return episodes, DropCounts.unscored(unscored)

    def _watched(
        self, episodes: list[Episode], dropped: Mapping[str, int], messages: dict[str, str] | None = None
    ) -> None:
        """Tell the watch what became of a call's (or group's) episodes: `dropped` by reason;
        `messages`: what went wrong, by reason (a scorer's error: the scoring tier's last)."""
        messages = dict(messages or {})
        if dropped.get(SCORER_ERROR) and self.scoring.last_error is not None:
            messages[SCORER_ERROR] = self.scoring.last_error
        self.watch.note(len(episodes), dropped, messages)

    def metrics(self) -> dict[str, float]:
        """Figures of the rollouts since the last call (multi-turn rollouts have some)."""
        return {}

    def state_dict(self) -> dict:
        """Where the prompt source is: its RNG state and the next group id."""
        return {"rng": self.rng.getstate(), "next_group": self._next_group, "tokens": self.tokens}

    def load_state_dict(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self._next_group = state["next_group"]
        self.tokens = state["tokens"]
