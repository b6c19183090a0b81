"""What the OpenAI-compatible endpoint costs: tool_lookup played natively and as an agent program.

    .venv/bin/python -m benchmarks.pipeline.agent_overhead                 # 40 steps each, 2 rounds
    .venv/bin/python -m benchmarks.pipeline.agent_overhead --agents aiohttp --rounds 3
    .venv/bin/python -m benchmarks.pipeline.agent_overhead --steps 60 --rounds 1 -- env.procs=1
    .venv/bin/python -m benchmarks.pipeline.agent_overhead --json PATH      # also the results in the report's shape

Runs `--config-name tool_lookup` (the native environment) and the same episodes as an agent
program through the endpoint, alternating, one after another on the same box. The agent
(docs/examples/tool_lookup_agent.py) asks for its turns with one of two clients:

    openai   the `openai` package's client (`play`)
    aiohttp  a bare HTTP client (benchmarks/harness/aiohttp_agent.py's `play_with_aiohttp`): the
             endpoint's own cost, with as little of the client's as an HTTP call can have

Per run: episodes per second over the steps after the first 10 (start-up and the first swaps
left out), the drops, and each agent run's ratio against the native run of the same round.
Overrides after `--` go to every run (e.g. env.procs=1 plays the agent runs' episodes, and
their endpoint, on a proc of their own; the native runs are the same either way).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows

AGENTS = {
    "openai": "env.name=agent:docs.examples.tool_lookup_agent:play",
    "aiohttp": "env.name=agent:benchmarks.harness.aiohttp_agent:play_with_aiohttp",
}
WARM_UP_STEPS = 10


def one_run(steps: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        timed_run(REPO, steps, ["--config-name=tool_lookup", *overrides], run_dir)
        metrics, _ = read_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
    steady = [m for m in metrics if m["step"] > WARM_UP_STEPS]
    seconds = steady[-1]["time/wall_s"] - steady[0]["time/wall_s"]
    episodes = summary["trained"] / summary["steps"] * (len(steady) - 1)  # trained in those steps
    return {
        "episodes_per_s": episodes / seconds,
        "dropped": summary["dropped_by_reason"],
        "reward_last": summary["reward_last"],
    }


def ratio(round_: dict[str, dict], agent: str) -> float:
    return round_[agent]["episodes_per_s"] / round_["native"]["episodes_per_s"]


def result_of(rounds: list[dict[str, dict]], agents: list[str]) -> BenchmarkResult:
    """`rounds`: per round, "native" and each agent -> one_run's figures."""
    result = BenchmarkResult(
        "agent_overhead", "Agent program through the endpoint vs the native environment", this_command()
    )
    for agent in agents:
        result.figure(
            f"{agent} agent / native episodes/s (median over rounds)",
            statistics.median(ratio(r, agent) for r in rounds),
            "x",
        )
    for name in ("native", *agents):
        result.figure(
            f"{name} episodes/s (median over rounds)",
            statistics.median(r[name]["episodes_per_s"] for r in rounds),
            "episodes/s",
        )
    rows = []
    for i, r in enumerate(rounds):
        for name in ("native", *agents):
            against = "" if name == "native" else f"{ratio(r, name):.2f}"
            rows.append(
                [
                    i,
                    name,
                    f"{r[name]['episodes_per_s']:.1f}",
                    against,
                    f"{r[name]['reward_last']:.2f}",
                    f"{r[name]['dropped'] or 0}",
                ]
            )
    columns = ["round", "episodes", "episodes/s", "against native", "final reward", "dropped"]
    result.tables.append(Table(f"Episodes/s over the steps after the first {WARM_UP_STEPS}", columns, rows))
    names = [f"round {i}" for i in range(len(rounds))]
    lines = [Line(name, names, [r[name]["episodes_per_s"] for r in rounds]) for name in ("native", *agents)]
    result.series.append(Series("Episodes/s, native against the agent program", "", "episodes/s", lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="native then each agent, this many times")
    parser.add_argument("--agents", nargs="+", choices=list(AGENTS), default=list(AGENTS), help="the agent's clients")
    parser.add_argument("overrides", nargs="*", help="after --: Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    rounds = []
    for round_ in range(args.rounds):
        runs = {"native": one_run(args.steps, args.overrides)}
        for agent in args.agents:
            runs[agent] = one_run(args.steps, [AGENTS[agent], *args.overrides])
        rounds.append(runs)
        for name, run in runs.items():
            against = "" if name == "native" else f" | {ratio(runs, name):.2f}x native"
            print(
                f"round {round_} {name:7} | {run['episodes_per_s']:6.1f} episodes/s{against}"
                f" | reward {run['reward_last']:.2f} | dropped {run['dropped'] or 0}",
                flush=True,
            )
    for agent in args.agents:
        print(
            f"{agent} agent / native episodes/s over {args.rounds} rounds: median {statistics.median(ratio(r, agent) for r in rounds):.2f}"
        )
    if args.json:
        result_of(rounds, args.agents).write(args.json)


if __name__ == "__main__":
    main()
