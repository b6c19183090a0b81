"""What one agent turn costs without the model: the endpoint's share against the client's.

    .venv/bin/python -m benchmarks.components.agent_turn_cost [--episodes 256] [--rounds 2] [--json PATH]

Plays tool_lookup episodes in one process through the episode runner, all at once, with a
stand-in for the generator that answers each turn right away (so only the environment's
side is timed), three ways:

    native   tool_lookup's own environment (forge_async/envs/games/tool_lookup.py)
    openai   docs/examples/tool_lookup_agent.py: an `openai` client through the endpoint
    aiohttp  the same agent with a bare aiohttp client (benchmarks/harness/aiohttp_agent.py)

and prints the CPU milliseconds a model turn costs in each. `aiohttp` minus `native` is
the endpoint's own cost (HTTP server, request validation, the session's token
bookkeeping); `openai` minus `aiohttp` is what the `openai` client adds.
"""

import argparse
import asyncio
import random
import statistics
import time


from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.envs.agent.config import AgentConfig
from forge_async.envs.agent.endpoint import stop_shared_endpoint
from forge_async.envs.agent.environment import AgentEpisodes
from forge_async.envs.runner import EnvRunner, EpisodeLimits
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.tasks.task import Prompt
from forge_async.envs.games.tool_lookup import ToolLookupEnv, ToolLookupTask

TOKENIZER = build_digit_tokenizer()
WAYS = {
    "native": lambda: ToolLookupEnv(TOKENIZER.eos_token_id),
    "openai": AgentEpisodes("agent:docs.examples.tool_lookup_agent:play", AgentConfig(), TOKENIZER),
    "aiohttp": AgentEpisodes("agent:benchmarks.harness.aiohttp_agent:play_with_aiohttp", AgentConfig(), TOKENIZER),
}


async def answer_at_once(prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
    """The generator's stand-in: the key (turn 1) or the tool's reply (turn 2), then EOS."""
    digit = prompt_ids[1] if len(prompt_ids) == 3 else prompt_ids[-2]
    return Completion(prompt_ids, [digit, TOKENIZER.eos_token_id], [0.0, 0.0], [0, 0], str(digit), "stop")


async def cpu_ms_per_turn(new_environment, prompts: list[Prompt]) -> float:
    runner = EnvRunner(new_environment, TOKENIZER, SamplingConfig(max_tokens=2), EpisodeLimits(2, 16, 64), 60.0)
    prepare = getattr(new_environment, "prepare_process", None)
    if prepare is not None:
        await prepare()
    await asyncio.gather(*(runner.play(p, answer_at_once) for p in prompts[:8]))  # warm: clients, imports
    started = time.process_time()
    completions = await asyncio.gather(*(runner.play(p, answer_at_once) for p in prompts))
    seconds = time.process_time() - started
    assert all(c.env_reward == 1.0 for c in completions), "an episode was not played right"
    return seconds / sum(c.turns for c in completions) * 1e3


async def measure(episodes: int, rounds: int) -> dict[str, list[float]]:
    """Way -> CPU ms a turn, one value per round."""
    task = ToolLookupTask(TOKENIZER, 10)
    rng = random.Random(0)
    prompts = [task.sample(rng) for _ in range(episodes)]
    figures: dict[str, list[float]] = {way: [] for way in WAYS}
    try:
        for _ in range(rounds):
            for way, new_environment in WAYS.items():
                figures[way].append(await cpu_ms_per_turn(new_environment, prompts))
    finally:
        await stop_shared_endpoint()
    return figures


def result_of(medians: dict[str, float], figures: dict[str, list[float]], episodes: int) -> BenchmarkResult:
    result = BenchmarkResult("agent_turn_cost", "CPU cost of one agent turn, the model left out", this_command())
    for way, ms in medians.items():
        result.figure(f"{way} CPU a turn", ms, "ms")
    result.figure("the endpoint's own share (aiohttp - native)", medians["aiohttp"] - medians["native"], "ms")
    result.figure("the openai client's share (openai - aiohttp)", medians["openai"] - medians["aiohttp"], "ms")
    rows = [[way, medians[way], ", ".join(f"{ms:.3f}" for ms in values)] for way, values in figures.items()]
    title = f"CPU ms a model turn, {episodes} tool_lookup episodes played at once"
    result.tables.append(Table(title, ["way", "median (ms)", "per round (ms)"], rows))
    result.series.append(
        Series(title, "", "CPU ms a turn", [Line("median", list(medians), list(medians.values()))], bars=True)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=256, help="played at once")
    parser.add_argument("--rounds", type=int, default=3)
    add_json_argument(parser)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.episodes, args.rounds))
    medians = {way: statistics.median(values) for way, values in figures.items()}
    for way, ms in medians.items():
        print(f"{way:8} {ms:6.3f} ms of CPU a turn (median of {args.rounds})")
    if args.json:
        result_of(medians, figures, args.episodes).write(args.json)


if __name__ == "__main__":
    main()
