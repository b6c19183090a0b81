"""Does self-play teach a two-player game? Nim (env.name=nim, configs/selfplay_nim.yaml) trained two
ways for the same steps, per seed, one run after another:

    self-play      env.seats=[policy,policy]   both seats the policy
    vs random      env.seats=[policy,random]   the policy against the random seat only

    .venv/bin/python -m benchmarks.learning.self_play                  # seeds 0-2, 300 steps each
    .venv/bin/python -m benchmarks.learning.self_play --json PATH      # also the results in the report's shape
    .venv/bin/python -m benchmarks.learning.self_play --seeds 1 --steps 100 -- eval.prompts=64

Both are evaluated the same way, against the random seat on held-out seeds
(eval.seats=[policy,random], greedy, every eval.every_steps): the win rate (`eval/won_frac`) at the
start, at the end and over the last five evaluations, its best, and the first evaluated step at which
it reaches the target (0.8).
The game's optimum against random on those seeds (nim.best_win_rate) is printed beside them.
Both arms train on as many samples per step (a self-play game gives a sample per seat).
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.app_run import REPO, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.envs.games.nim import best_win_rate
from forge_async.observability.metrics import read_rows

ARMS = {"self-play": "[policy,policy]", "vs random": "[policy,random]"}


def one_run(arm: str, seed: int, args: argparse.Namespace) -> dict:
    """One arm's run: its evaluations' win rates against random, by step."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [
            "--config-name=selfplay_nim",
            f"seed={seed}",
            f"env.seats={ARMS[arm]}",
            f"eval.prompts={args.eval_prompts}",
            *args.overrides,
        ]
        lines = timed_run(REPO, args.steps, command, run_dir)
        metrics, evaluations = read_rows(run_dir)
    steps_at = [e["eval/version"] for e in evaluations]
    won = [e["eval/won_frac"] for e in evaluations]
    return {
        "arm": arm,
        "seed": seed,
        "steps": steps_at,
        "won": won,
        "reached": next((step for step, w in zip(steps_at, won) if w >= args.target), None),
        "entropy": statistics.fmean(m["train/entropy"] for m in metrics[-10:]),
        "seconds": lines[-1][0],
    }


COLUMNS = [
    "arm",
    "seed",
    "won at start",
    "won at end",
    "last 5 evaluations",
    "best",
    "step reaching {target}",
    "entropy at end",
    "seconds",
]


def cells(r: dict) -> list:
    return [
        r["arm"],
        r["seed"],
        round(r["won"][0], 2),
        round(r["won"][-1], 2),
        round(statistics.fmean(r["won"][-5:]), 2),
        round(max(r["won"]), 2),
        r["reached"] if r["reached"] is not None else "-",
        round(r["entropy"], 3),
        round(r["seconds"]),
    ]


def result_of(results: list[dict], args: argparse.Namespace, optimum: float) -> BenchmarkResult:
    result = BenchmarkResult("self_play", "Self-play on Nim: win rate against a random player", this_command())
    seeds, target = args.seeds, args.target
    result.figure("optimum against random on the held-out seeds", optimum, "")
    for arm in ARMS:
        runs = [r for r in results if r["arm"] == arm]
        reached = [r["reached"] for r in runs if r["reached"] is not None]
        result.figure(f"{arm}: seeds reaching {target}", len(reached), f"of {seeds}")
        if reached:
            result.figure(f"{arm}: median step reaching {target}", statistics.median(reached), "steps")
        result.figure(f"{arm}: median win rate at the end", statistics.median(r["won"][-1] for r in runs), "")
        last = statistics.median(statistics.fmean(r["won"][-5:]) for r in runs)
        result.figure(f"{arm}: median win rate over the last 5 evaluations", last, "")
        result.figure(f"{arm}: median best win rate", statistics.median(max(r["won"]) for r in runs), "")
    columns = [c.format(target=target) for c in COLUMNS]
    result.tables.append(
        Table(
            f"Per seed and arm: win rate against random (greedy, {args.eval_prompts} held-out seeds)",
            columns,
            [cells(r) for r in results],
        )
    )
    for arm in ARMS:
        runs = [r for r in results if r["arm"] == arm]
        lines = [Line(f"seed {r['seed']}", r["steps"], r["won"]) for r in runs]
        lines.append(Line("optimum", [runs[0]["steps"][0], runs[0]["steps"][-1]], [optimum, optimum]))
        result.series.append(Series(f"{arm}: win rate against random", "step", "won", lines))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--steps", type=int, default=300, help="each run's")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--eval-prompts", type=int, default=128, help="held-out seeds 0 .. N-1 each evaluation plays")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    add_json_argument(parser)
    args = parser.parse_args()
    optimum = best_win_rate(list(range(args.eval_prompts)))
    print(f"optimum against random on seeds 0-{args.eval_prompts - 1}: {optimum:.3f}")
    print(" | ".join(c.format(target=args.target) for c in COLUMNS), flush=True)
    results = []
    for seed in range(args.seeds):
        for arm in ARMS:
            results.append(one_run(arm, seed, args))
            print(" | ".join(map(str, cells(results[-1]))), flush=True)
    result = result_of(results, args, optimum)
    for series in result.series:
        print(f"\n{series.title}")
        for line in series.lines:
            print(f"  {line.label}: " + " ".join(f"{x}:{y:.2f}" for x, y in zip(line.x, line.y)))
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
