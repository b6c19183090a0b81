"""seeds: prompts that carry only a seed, for environments that make their own first observation.

A game (env.name=textarena:GAME) or an environment server deals its episode from a seed:
the prompt says which one, `Prompt(token_ids=[], answer="", meta={"seed": n})`, and the
environment's `reset` returns what the model sees first. The episodes of a group share
their prompt, hence their seed: the same game, played `group_size` times.

Held-out seeds are 0, 1, ..., eval.prompts - 1; training draws from [TRAIN_SEEDS_FROM, 2**31),
so evaluation plays games that training never dealt. The reward is the environment's.
"""

import random

from forge_async.data.episode import Completion
from forge_async.tasks.task import Prompt, TaskError

TRAIN_SEEDS_FROM = 1_000_000  # seeds below it are held out (at most this many)
_SEEDS_TO = 2**31  # the last seed + 1: within what any game's seeding takes


def seed_prompt(seed: int) -> Prompt:
    return Prompt(token_ids=[], answer="", text=f"seed {seed}", meta={"seed": seed})


class SeedsTask:
    name = "seeds"

    def __init__(self) -> None:
        self.skipped_rows: dict[str, int] = {}  # generated: no rows to skip

    def sample(self, rng: random.Random) -> Prompt:
        return seed_prompt(rng.randrange(TRAIN_SEEDS_FROM, _SEEDS_TO))

    def hold_out(self, count: int) -> list[Prompt]:
        if count > TRAIN_SEEDS_FROM:
            raise TaskError(f"eval.prompts={count}: task.name=seeds holds out at most {TRAIN_SEEDS_FROM} seeds")
        return [seed_prompt(seed) for seed in range(count)]

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        """The environment's: the episode's step rewards, summed."""
        return completion.played_reward

    def demonstration(self, prompt: Prompt) -> str:
        raise TaskError("task.name=seeds deals episodes from seeds: there is no completion to imitate")
