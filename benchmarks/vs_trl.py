"""forge_async against TRL's synchronous GRPOTrainer: seconds from launch to a reward, same box, same run.

    pip install -e ".[bench]"    # TRL, for this benchmark only
    .venv/bin/python -m benchmarks.vs_trl [--runs 3] [--num-digits 5] [--steps 400] [-- overrides ...]
    .venv/bin/python -m benchmarks.vs_trl --completion-tokens 128 --steps 30 --runs 1

Both start from the same tiny checkpoint (created here, before any clock starts) and learn
max-of-N-digits with 16 prompts x 8 completions per step and lr 1e-3. Each run is timed from
process launch, as a user waits for it: `python -m apps.grpo model.path=CKPT task.num_digits=N`
and `python -m benchmarks.trl_grpo CKPT --num-digits N` (see its docstring for TRL's settings).
The runs alternate (forge_async, TRL, forge_async, ...) with seeds 0 .. runs-1. Prints, per run
and as medians: launch -> first step, steps/s, and the step and second at which the 5-step
moving-average reward first reaches the target.

With `--completion-tokens N` every completion on both sides is exactly N tokens (EOS held back
until then: `sampling.min_tokens`, and TRL's `min_new_tokens`) on a tiny model whose context
fits them: the comparison of generation and training at realistic lengths rather than of
per-call overhead. Then it prints each side's trained tokens/s (steps/s x 128 completions x N)
and forge_async's generated tokens/s (its generator's median `generator/tokens_per_s`; TRL
generates what it trains), and their ratio.
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.pipeline import first_reaching
from benchmarks.startup import timed_run
from forge_async.metrics import read_rows
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.runtime import environment_without_defaults

REPO = Path(__file__).resolve().parents[1]
_TRL_STEP = re.compile(r"^step (\d+) reward ([0-9.]+)$")
COMPLETIONS_PER_STEP = 16 * 8  # both sides: 16 prompts x 8 completions


def forge_async_run(checkpoint: Path, num_digits: int, steps: int, seed: int, target: float, overrides: list[str]) -> dict:
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
    command = [
        sys.executable, "-m", "benchmarks.trl_grpo", str(checkpoint),
        f"--num-digits={num_digits}", f"--steps={steps}", f"--seed={seed}",
        *([f"--completion-tokens={tokens}"] if tokens else []),
    ]
    start = time.perf_counter()
    # TRL gets the user's environment, without forge_async's process defaults (OMP_WAIT_POLICY=PASSIVE
    # slows a single process that uses both cores for its small parallel regions).
    proc = subprocess.Popen(
        command, cwd=REPO, env=environment_without_defaults(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
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
    }


def _median(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs if r[key] is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each, seeds 0 .. runs-1")
    parser.add_argument("--num-digits", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="the default config's (its lr decay spans them)")
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--completion-tokens", type=int, default=None, help="every completion exactly N tokens")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the forge_async runs")
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
    if tokens:
        print_token_rates(results, tokens)


def print_token_rates(results: dict[str, list[dict]], tokens: int) -> None:
    """Trained (and, for forge_async, generated) tokens/s of each side, medians over the runs."""
    trained = {name: statistics.median(r["steps_per_s"] for r in runs) * COMPLETIONS_PER_STEP * tokens
               for name, runs in results.items()}
    generated = [r["generated_tokens_per_s"] for r in results["forge_async"] if r["generated_tokens_per_s"]]
    print(f"\ncompletions of exactly {tokens} tokens, {COMPLETIONS_PER_STEP} per step:")
    print(f"  trained tokens/s: forge_async {trained['forge_async']:.0f}, TRL {trained['TRL']:.0f} "
          f"({trained['forge_async'] / trained['TRL']:.2f}x)")
    if generated:
        print(f"  generated tokens/s: forge_async {statistics.median(generated):.0f} (its generator, steady state), "
              f"TRL {trained['TRL']:.0f} (it trains all it generates)")


if __name__ == "__main__":
    main()
