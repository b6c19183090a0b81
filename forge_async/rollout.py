"""Rollouts: prompts -> generator -> scoring tier -> replay buffer.

Runs in the controller process, off the trainer's critical path: while the
trainer steps, rollout workers keep their generators busy, have what comes back
scored (forge_async/scoring/) and hand the episodes to the buffer.
"""

import asyncio
import random
from collections.abc import Awaitable, Callable
from forge_async.actors.generator_config import SamplingConfig
from forge_async.admission import AdmissionControl
from forge_async.data.episode import Completion, Episode
from forge_async.data.tasks import Prompt, Task
from forge_async.scoring.tier import ScoringTier
from forge_async.trace import HELD_BACK
from forge_async.tracing import TRACER

# (prompt token ids, sampling, completions per prompt) -> one group of completions per prompt
Generate = Callable[[list[list[int]], SamplingConfig, int], Awaitable[list[list]]]
Dropped = dict[str, int]  # samples lost before the buffer, by reason


class Rollouts:
    def __init__(
        self,
        task: Task,
        scoring: ScoringTier,
        sampling: SamplingConfig,
        group_size: int,
        prompts_per_call: int,
        seed: int,
    ):
        self.task = task
        self.scoring = scoring
        self.sampling = sampling
        self.group_size = group_size
        self.prompts_per_call = prompts_per_call
        self.rng = random.Random(seed)
        self.tokens = 0  # completion tokens produced
        self._next_group = 0

    async def produce(self, generate: Generate, num_prompts: int | None = None) -> tuple[list[Episode], Dropped]:
        """One generate call, scored: its episodes, and the completions lost on the way, by reason."""
        prompts = [self.task.sample(self.rng) for _ in range(num_prompts or self.prompts_per_call)]
        groups = await generate([p.token_ids for p in prompts], self.sampling, self.group_size)
        self.tokens += sum(len(c.token_ids) for group in groups for c in group)
        return await self._scored(prompts, groups)

    async def _scored(self, prompts: list[Prompt], groups: list[list[Completion]]) -> tuple[list[Episode], Dropped]:
        first_group, self._next_group = self._next_group, self._next_group + len(prompts)
        episodes, unscored = await self.scoring.score(prompts, groups, first_group)
        return episodes, ({"scorer_error": unscored} if unscored else {})

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

    async def run_worker(
        self,
        generate: Generate,
        generator_version,
        buffer,
        admission: AdmissionControl,
        stop: asyncio.Event,
        lane: str = "rollout worker",
        partial_calls: bool = False,
    ) -> None:
        """Generate into the buffer until `stop` is set; finishes the call in flight.

        `generator_version()` gives the oldest version the generator can sample with
        from now on; admission control uses it to bound the work in flight. With
        `partial_calls` (groups may be dropped on arrival), a call takes as many
        prompts as admission has room for, at least one.
        """
        size = self.prompts_per_call * self.group_size
        unit = self.group_size if partial_calls else None
        while not stop.is_set():
            with TRACER.span(HELD_BACK, lane):
                admitted = await admission.admit(size, generator_version, unit)
            if not admitted:
                return
            with TRACER.span("generate + score", lane):
                episodes, dropped = await self.produce(generate, admitted // self.group_size)
            with TRACER.span("buffer add", lane):
                await buffer.add(episodes, dropped)
            await admission.generated(admitted)
