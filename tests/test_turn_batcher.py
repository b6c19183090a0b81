"""TurnBatcher: the turns of concurrent episodes go to the generators together, however many
passes of the event loop their environments take to step (forge_async/envs/turn_batcher.py).

The generators are left out: what is checked is which turns share a generate call."""

import asyncio

import pytest

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.envs.environment import EnvStep, ModelTurn
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.rollout.multi_turn import WorkerEpisodes
from forge_async.envs.turn_batcher import TurnBatcher
from forge_async.tasks.task import Prompt

pytestmark = pytest.mark.unit

TOKENIZER = build_digit_tokenizer()
TURNS = 3


class SlowToStep:
    """An environment whose step takes `passes` passes of the event loop (as an agent's next
    request through the endpoint does), or `seconds` of sleep."""

    def __init__(self, passes: int, seconds: float = 0.0):
        self.passes, self.seconds = passes, seconds

    async def reset(self, prompt: Prompt) -> list[int]:
        return list(prompt.token_ids)

    async def step(self, turn: ModelTurn) -> EnvStep:
        for _ in range(self.passes):
            await asyncio.sleep(0)
        await asyncio.sleep(self.seconds)
        return EnvStep(observation=[1], done=turn.index == TURNS - 1)


class Calls:
    """A generate that answers every prompt at once and keeps each call's size."""

    def __init__(self):
        self.sizes: list[int] = []

    async def __call__(self, prompts: list[list[int]], sampling: SamplingConfig, n: int) -> list[list[Completion]]:
        self.sizes.append(len(prompts))
        await asyncio.sleep(0.001)
        return [[Completion(ids, [2], [0.0], [0], "2", "stop")] for ids in prompts]


MAX_WAIT_S = 0.005


def play(episodes: list[EnvRunner]) -> tuple[list[int], list[Completion]]:
    calls = Calls()

    async def main() -> list[Completion]:
        batcher = TurnBatcher(calls, MAX_WAIT_S)
        prompt = Prompt([11, 3, 13], "3")
        return await asyncio.gather(*(batcher.play(runner, prompt) for runner in episodes))

    return calls.sizes, asyncio.run(main())


def runner_of(env: SlowToStep) -> EnvRunner:
    return EnvRunner(lambda: env, TOKENIZER, SamplingConfig(max_tokens=2), EpisodeLimits(TURNS, 64, 128), 10.0)


def test_turns_of_episodes_that_step_over_several_passes_go_out_together():
    sizes, completions = play([runner_of(SlowToStep(passes=i)) for i in range(8)])
    assert sizes == [8] * TURNS, sizes
    assert all(c.turns == TURNS for c in completions)


def test_episodes_that_step_at_once_go_out_together():
    sizes, _ = play([runner_of(SlowToStep(passes=0)) for _ in range(8)])
    assert sizes == [8] * TURNS, sizes


def test_a_slow_environment_holds_the_others_no_longer_than_the_wait():
    slow = SlowToStep(passes=0, seconds=20 * MAX_WAIT_S)
    sizes, completions = play([runner_of(SlowToStep(passes=0)) for _ in range(7)] + [runner_of(slow)])
    # First turns together; then the seven fast episodes go on without waiting for the slow
    # one's steps, which go out on their own.
    assert sizes == [8, 7, 7, 1, 1], sizes
    assert all(c.turns == TURNS for c in completions)


def test_a_worker_keeps_one_turn_batcher_per_generator():
    """A rollout worker's multi-turn groups on one generator share a TurnBatcher, kept (rollout/multi_turn.py)."""

    class Generator:
        def __init__(self, index: int):
            self.index, self.generate = index, Calls()

    class Runner:
        turn_batch_wait_s = MAX_WAIT_S

    class Rollouts:
        runner = Runner()

    worker = WorkerEpisodes(Rollouts())
    first, second = Generator(0), Generator(1)
    batcher = worker.batcher(first)
    assert worker.batcher(first) is batcher and worker.batcher(second) is not batcher
    assert batcher.generate is first.generate
