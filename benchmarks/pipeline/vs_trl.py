"""forge_async against TRL's synchronous GRPOTrainer: seconds from launch to a reward, same box, same run.

    pip install -e ".[bench]"    # TRL, for this benchmark only
    .venv/bin/python -m benchmarks.pipeline.vs_trl [--runs 3] [--num-digits 5] [--steps 400] [-- overrides ...]
    .venv/bin/python -m benchmarks.pipeline.vs_trl --completion-tokens 128 --steps 30 --runs 1

Both start from the same tiny checkpoint (created here, before any clock starts) and learn
max-of-N-digits with 16 prompts x 8 completions per step and lr 1e-3. Each run is timed from
process launch, as a user waits for it: `python -m apps.grpo model.path=CKPT task.num_digits=N`
and `python -m benchmarks.pipeline.trl_grpo CKPT --num-digits N` (see its docstring for TRL's settings).
The runs alternate (forge_async, TRL, forge_async, ...) with seeds 0 .. runs-1. Prints, per run
and as medians: launch -> first step, steps/s, and the step and second at which the 5-step
moving-average reward first reaches the target.

With `--completion-tokens N` every completion on both sides is exactly N tokens (EOS held back
until then: `sampling.min_tokens`, and TRL's `min_new_tokens`) on a tiny model whose context
fits them: the comparison of generation and training at realistic lengths rather than of
per-call overhead. Then it prints each side's trained tokens/s (steps/s x 128 completions x N)
and forge_async's generated tokens/s (its generator's median `generator/tokens_per_s`; TRL
generates what it trains), and their ratio.

With --json, the same in the report's shape (benchmarks/harness/results.py), with each side's reward
against the seconds from launch in its first run.
"""

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness.app_run import REPO, first_reaching, launch_trl, timed_run
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.observability.metrics import read_rows
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint

_TRL_STEP = re.compile(r"^step (\d+) reward ([0-9.]+) ")
COMPLETIONS_PER_STEP = 16 * 8  # both sides: 16 prompts x 8 completions


def forge_async_run(
    checkpoint: Path, num_digits: int, steps: int, seed: int, target: float, overrides: list[str]
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        overrides = [f"model.path={checkpoint}", f"task.num_digits={num_digits}", f"seed={seed}", *overrides]
        lines = timed_run(REPO, steps, overrides, run_dir)
        metrics, _ = read_rows(run_dir)
    step_times = [t for t, line in lines if line.startswith("step ")]
    result = _result(step_times, [m["reward/mean"] for m in metrics], target)
    steady = [m["generator/tokens_per_s"] for m in metrics[len(metrics) // 5 :] if m.get("generator/tokens_per_s")]
    result["generated_tokens_per_s"] = statistics.median(steady) if steady else None
    return result


def trl_run(checkpoint: Path, num_digits: int, steps: int, seed: int, target: float, tokens: int | None) -> dict:
    arguments = [
        str(checkpoint),
        f"--num-digits={num_digits}",
        f"--steps={steps}",
        f"--seed={seed}",
        *([f"--completion-tokens={tokens}"] if tokens else []),
    ]
    start = time.perf_counter()
    proc = launch_trl(arguments)
    step_times, rewards, tail = [], [], []
    for line in proc.stdout:
        tail = (tail + [line])[-30:]
        if match := _TRL_STEP.match(line.strip()):
            step_times.append(time.perf_counter() - start)
            rewards.append(float(match.group(2)))
    if proc.wait() != 0:
        raise SystemExit("the TRL run failed (is TRL installed? pip install -e '.[bench]'):\n" + "".join(tail))
    return _result(step_times, rewards, target)


def _result(step_times: list[float], rewards: list[float], target: float) -> dict:
    """Step i's console line came at step_times[i] seconds from launch, with reward rewards[i]."""
    reached = first_reaching(rewards, target)
    return {
        "first_step_s": step_times[0],
        "steps_per_s": (len(step_times) - 1) / (step_times[-1] - step_times[0]),
        "step": reached + 1 if reached is not None else None,
        "seconds": step_times[reached] if reached is not None else None,
        "reward_curve": (step_times, rewards),
    }


def median_of(runs: list[dict], key: str) -> float | None:
    """The median over the runs that have a value (None: none has)."""
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def _median(runs: list[dict], key: str) -> str:
    value = median_of(runs, key)
    return f"{value:.1f}" if value is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each, seeds 0 .. runs-1")
    parser.add_argument("--num-digits", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="the default config's (its lr decay spans them)")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--completion-tokens", type=int, default=None, help="every completion exactly N tokens")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the forge_async runs")
    add_json_argument(parser)
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"forge_async": [], "TRL": []}
    tokens = args.completion_tokens
    overrides = args.overrides + ([f"sampling.max_tokens={tokens}", f"sampling.min_tokens={tokens}"] if tokens else [])
    with tempfile.TemporaryDirectory() as tmp:
        # the digits tokenizer's 64-token context, or room for the prompt and N tokens
        tiny = TinyModelConfig(max_seq_len=tokens + 64) if tokens else TinyModelConfig()
        checkpoint = create_tiny_checkpoint(Path(tmp) / "tiny", tiny)
        print(f"{'':12}{'seed':>5}{'first step (s)':>16}{'steps/s':>9}{'step at target':>16}{'s at target':>13}")
        for seed in range(args.runs):
            for name in results:
                if name == "TRL":
                    r = trl_run(checkpoint, args.num_digits, args.steps, seed, args.target, tokens)
                else:
                    r = forge_async_run(checkpoint, args.num_digits, args.steps, seed, args.target, overrides)
                results[name].append(r)
                print(
                    f"{name:12}{seed:>5}{r['first_step_s']:>16.1f}{r['steps_per_s']:>9.1f}"
                    f"{r['step'] or '-':>16}{r['seconds'] or float('nan'):>13.1f}",
                    flush=True,
                )
    print()
    for name, runs in results.items():
        print(
            f"{name}: median first step {_median(runs, 'first_step_s')} s, {_median(runs, 'steps_per_s')} steps/s, "
            f"target {args.target} at step {_median(runs, 'step')}, {_median(runs, 'seconds')} s from launch "
            f"({sum(r['seconds'] is not None for r in runs)}/{len(runs)} runs reach it)"
        )
    rates = token_rates(results, tokens) if tokens else None
    if rates:
        print_token_rates(rates, tokens)
    if args.json:
        result_of(results, args.target, rates).write(args.json)


def token_rates(results: dict[str, list[dict]], tokens: int) -> dict[str, dict[str, float]]:
    """Trained and generated tokens/s of each side, medians over the runs (`trained`, `generated`:
    side -> tokens/s). TRL generates what it trains; forge_async's generated figure is its
    generator's, left out where no run measured it."""
    trained = {
        name: statistics.median(r["steps_per_s"] for r in runs) * COMPLETIONS_PER_STEP * tokens
        for name, runs in results.items()
    }
    forge_async = median_of(results["forge_async"], "generated_tokens_per_s")
    generated = ({"forge_async": forge_async} if forge_async is not None else {}) | {"TRL": trained["TRL"]}
    return {"trained": trained, "generated": generated}


def print_token_rates(rates: dict[str, dict[str, float]], tokens: int) -> None:
    trained, generated = rates["trained"], rates["generated"]
    print(f"\ncompletions of exactly {tokens} tokens, {COMPLETIONS_PER_STEP} per step:")
    print(
        f"  trained tokens/s: forge_async {trained['forge_async']:.0f}, TRL {trained['TRL']:.0f} "
        f"({trained['forge_async'] / trained['TRL']:.2f}x)"
    )
    if "forge_async" in generated:
        print(
            f"  generated tokens/s: forge_async {generated['forge_async']:.0f} (its generator, steady state), "
            f"TRL {generated['TRL']:.0f} (it trains all it generates)"
        )


RUN_COLUMNS = ["side", "seed", "first step (s)", "steps/s", "step at target", "s at target"]


def result_of(
    results: dict[str, list[dict]], target: float, rates: dict[str, dict[str, float]] | None
) -> BenchmarkResult:
    result = BenchmarkResult("vs_trl", "Against TRL's synchronous GRPOTrainer", this_command())
    at_target = {name: median_of(runs, "seconds") for name, runs in results.items()}
    for name, runs in results.items():
        if at_target[name] is not None:
            result.figure(f"{name}: launch -> 5-step mean reward {target} (median)", at_target[name], "s")
        result.figure(f"{name}: steps/s (median)", median_of(runs, "steps_per_s"), "steps/s")
        result.figure(f"{name}: launch -> first step (median)", median_of(runs, "first_step_s"), "s")
    if None not in at_target.values():
        result.figure(
            f"forge_async speed-up to reward {target} (TRL's median s / forge_async's)",
            at_target["TRL"] / at_target["forge_async"],
            "x",
        )
    for kind, by_side in (rates or {}).items():
        for name, value in by_side.items():
            result.figure(f"{name}: {kind} tokens/s (median)", value, "tokens/s")
        if len(by_side) == 2:
            result.figure(f"forge_async / TRL, {kind} tokens/s", by_side["forge_async"] / by_side["TRL"], "x")
    rows = [
        [name, seed, r["first_step_s"], r["steps_per_s"], r["step"], r["seconds"]]
        for name, runs in results.items()
        for seed, r in enumerate(runs)
    ]
    result.tables.append(Table("Every run (seconds from launch)", RUN_COLUMNS, rows))
    lines = [Line(name, *runs[0]["reward_curve"]) for name, runs in results.items()]
    result.series.append(
        Series(
            "Reward against wall time (each side's seed 0)",
            "seconds from launch",
            "reward (mean over the batch)",
            lines,
        )
    )
    return result


if __name__ == "__main__":
    main()
