"""What the OpenAI-compatible endpoint costs: tool_lookup played natively and as an agent program.

    .venv/bin/python -m benchmarks.agent_overhead                 # 40 steps each, 2 rounds
    .venv/bin/python -m benchmarks.agent_overhead --steps 60 --rounds 1 -- env.procs=1

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="native then agent, this many times")
    parser.add_argument("overrides", nargs="*", help="after --: Hydra overrides for every run")
    args = parser.parse_args()
    ratios = []
    for round_ in range(args.rounds):
        native = one_run(args.steps, args.overrides)
        agent = one_run(args.steps, [AGENT, *args.overrides])
        ratios.append(agent["episodes_per_s"] / native["episodes_per_s"])
        for name, run in (("native", native), ("agent", agent)):
            print(
                f"round {round_} {name:6} | {run['episodes_per_s']:6.1f} episodes/s"
                f" | reward {run['reward_last']:.2f} | dropped {run['dropped'] or 0}",
                flush=True,
            )
        print(f"round {round_} agent / native episodes/s: {ratios[-1]:.2f}", flush=True)
    print(f"agent / native episodes/s over {args.rounds} rounds: median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
