"""What the OpenAI-compatible endpoint costs: tool_lookup played natively and as an agent program.

    .venv/bin/python -m benchmarks.agent_overhead                 # 40 steps each, 2 rounds
    .venv/bin/python -m benchmarks.agent_overhead --steps 60 --rounds 1 -- env.procs=1
    .venv/bin/python -m benchmarks.agent_overhead --json PATH      # also the results in the report's shape

Runs `--config-name tool_lookup` (the native environment) and the same with
env.name=agent:docs.examples.tool_lookup_agent:play (a plain `openai` client through the
endpoint), alternating, one after another on the same box. Per run: episodes per second
over the steps after the first 10 (start-up and the first swaps left out), the drops, and the agent runs' ratio against the native ones of the same round.
Overrides after `--` go to every run (e.g. env.procs=1 plays the agent runs' episodes, and
their endpoint, on a proc of their own; the native runs are the same either way).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from benchmarks.startup import timed_run
from forge_async.metrics import read_rows

REPO = Path(__file__).resolve().parent.parent
AGENT = "env.name=agent:docs.examples.tool_lookup_agent:play"
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


def ratio(round_: dict[str, dict]) -> float:
    return round_["agent"]["episodes_per_s"] / round_["native"]["episodes_per_s"]


def result_of(rounds: list[dict[str, dict]]) -> BenchmarkResult:
    """`rounds`: per round, "native" and "agent" -> one_run's figures."""
    result = BenchmarkResult("agent_overhead", "Agent program through the endpoint vs the native environment", this_command())
    ratios = [ratio(r) for r in rounds]
    result.figure("agent / native episodes/s (median over rounds)", statistics.median(ratios), "x")
    for name in ("native", "agent"):
        result.figure(f"{name} episodes/s (median over rounds)", statistics.median(r[name]["episodes_per_s"] for r in rounds), "episodes/s")
    rows = [
        [i, f"{r['native']['episodes_per_s']:.1f}", f"{r['agent']['episodes_per_s']:.1f}", f"{ratio(r):.2f}",
         f"{r['native']['reward_last']:.2f} / {r['agent']['reward_last']:.2f}",
         f"{r['native']['dropped'] or 0} / {r['agent']['dropped'] or 0}"]
        for i, r in enumerate(rounds)
    ]
    columns = ["round", "native episodes/s", "agent episodes/s", "agent / native", "final reward (native / agent)", "dropped (native / agent)"]
    result.tables.append(Table(f"Episodes/s over the steps after the first {WARM_UP_STEPS}", columns, rows))
    names = [f"round {i}" for i in range(len(rounds))]
    lines = [Line(name, names, [r[name]["episodes_per_s"] for r in rounds]) for name in ("native", "agent")]
    result.series.append(Series("Episodes/s, native against the agent program", "", "episodes/s", lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="native then agent, this many times")
    parser.add_argument("overrides", nargs="*", help="after --: Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    rounds = []
    for round_ in range(args.rounds):
        rounds.append({"native": one_run(args.steps, args.overrides), "agent": one_run(args.steps, [AGENT, *args.overrides])})
        for name, run in rounds[-1].items():
            print(
                f"round {round_} {name:6} | {run['episodes_per_s']:6.1f} episodes/s"
                f" | reward {run['reward_last']:.2f} | dropped {run['dropped'] or 0}",
                flush=True,
            )
        print(f"round {round_} agent / native episodes/s: {ratio(rounds[-1]):.2f}", flush=True)
    print(f"agent / native episodes/s over {args.rounds} rounds: median {statistics.median(map(ratio, rounds)):.2f}")
    if args.json:
        result_of(rounds).write(args.json)


if __name__ == "__main__":
    main()
