"""The seams of rollouts: what a generator, a routing choice, a producer and the worker's shape are."""

from dataclasses import dataclass
from typing import Protocol

from forge_async.generation.config import SamplingConfig
from forge_async.data.buffer import DropCounts
from forge_async.data.episode import Completion, Episode


class Generator(Protocol):
    """What rollouts ask of one generator (handles/generators/generator.py: GeneratorHandle)."""

    async def generate(
        self, prompt_ids: list[list[int]], sampling: SamplingConfig, n: int
    ) -> list[list[Completion]]: ...


@dataclass(frozen=True)
class Choice:
    """The generator a call is to go to, and the oldest version it samples with from now on."""

    generator: Generator
    version: int


class Router(Protocol):
    """Chooses the generator for a worker's next call (rollout/routing.py); admission judges the call by it."""

    def choose(self) -> Choice: ...


class Producer(Protocol):
    """Plays a worker's admitted prompts on a generator: their scored episodes, and the samples lost
    on the way by reason (rollout/single_turn.py, rollout/multi_turn.py)."""

    async def produce(self, generator: Generator, num_prompts: int) -> tuple[list[Episode], DropCounts]: ...


@dataclass(frozen=True)
class WorkerShape:
    """How a rollout worker spends its admissions."""

    prompts_per_call: int  # prompts one produce call takes (at most, with partial_calls)
    calls_in_flight: int  # produce calls the worker keeps going at once
    partial_calls: bool = False  # a call takes as many prompts as admission has room for, at least one
    # the most samples one episode gives: its policy seats (env.seats), each a completion of its own
    samples_per_episode: int = 1

    def samples_per_prompt(self, group_size: int) -> int:
        """The most samples one prompt's group gives (a seat that never moved gives none)."""
        return group_size * self.samples_per_episode

    def samples_per_call(self, group_size: int) -> int:
        return self.prompts_per_call * self.samples_per_prompt(group_size)

    def least_admitted(self, group_size: int) -> int:
        """The fewest samples admission may admit for a call: one group with partial calls, else a whole call."""
        return self.samples_per_prompt(group_size) if self.partial_calls else self.samples_per_call(group_size)
