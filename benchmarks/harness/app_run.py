"""An app run as a user sees it: every console line timestamped from the launch, and when the
reward first reaches a target."""

import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from forge_async.cli.subprocess_run import hydra_command_line
from forge_async.process.runtime import environment_without_defaults

REPO = Path(__file__).resolve().parents[2]
STEP_LINE = re.compile(r"^step +(\d+)[ /]")  # a console step line


def timed_run(
    repo: Path,
    steps: int,
    overrides: list[str],
    run_dir: Path | None = None,
    app: str = "apps.grpo",
    on_line: Callable[[str], None] | None = None,
) -> list[tuple[float, str]]:
    """(seconds since launch, line) for every console line of `python -m APP`, and the exit as the
    last entry. The run goes to `run_dir` (default: a temporary directory, removed after);
    `on_line` sees each line as it is printed."""
    with tempfile.TemporaryDirectory() as tmp:
        command = hydra_command_line(run_dir or Path(tmp) / "run", (f"steps={steps}", *overrides))
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", app, *command],
            cwd=repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip()))
            if on_line is not None:
                on_line(lines[-1][1])
        if proc.wait() != 0:
            raise SystemExit("the app failed:\n" + "\n".join(line for _, line in lines[-30:]))
        return lines + [(time.perf_counter() - start, "<exit>")]


def first_reaching(rewards: list[float], target: float, window: int = 5) -> int | None:
    """Index of the first step whose `window`-step moving-average reward >= target, or None."""
    return next(
        (i for i in range(window - 1, len(rewards)) if sum(rewards[i - window + 1 : i + 1]) / window >= target), None
    )


def launch_to_reward(lines: list[tuple[float, str]], metrics: list[dict], target: float) -> tuple[float, int] | None:
    """(seconds from launch, step) at the console line of the first step whose 5-step mean
    reward >= target; None if no step reaches it."""
    i = first_reaching([m["reward/mean"] for m in metrics], target)
    if i is None:
        return None
    step = metrics[i]["step"]
    at = next(t for t, line in lines if (m := STEP_LINE.match(line)) and int(m.group(1)) == step)
    return at, step


def launch_trl(arguments: list[str]) -> subprocess.Popen:
    """benchmarks/pipeline/trl_grpo.py with `arguments`, its output (text) on a pipe, in the user's
    environment without forge_async's process defaults (OMP_WAIT_POLICY=PASSIVE slows a single
    process that uses both cores for its small parallel regions)."""
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.pipeline.trl_grpo", *arguments],
        cwd=REPO,
        env=environment_without_defaults(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
