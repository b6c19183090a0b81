"""Run `python -m apps.grpo` (or another app) in a subprocess, as a user would, and read its run directory.

Used by the tests and the benchmarks.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forge_async.observability.metrics import read_rows

REPO = Path(__file__).resolve().parents[2]


@dataclass
class AppRun:
    returncode: int
    output: str
    run_dir: Path
    acted_at: dict[int | str, float] = field(default_factory=dict)  # trigger -> time.monotonic() of its action
    ended_at: float = 0.0  # time.monotonic() when the process exited

    @property
    def metrics(self) -> list[dict]:
        """metrics.jsonl's training rows, one per step."""
        return read_rows(self.run_dir)[0]

    @property
    def evaluations(self) -> list[dict]:
        """metrics.jsonl's evaluation rows."""
        return read_rows(self.run_dir)[1]

    @property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())

    @property
    def procs(self) -> dict:
        """procs.json: role -> {host, pid} (the trainer: a list, one per rank)."""
        return json.loads((self.run_dir / "procs.json").read_text())


def run_app(run_dir: Path, *overrides: str, timeout: int = 600, app: str = "apps.grpo") -> AppRun:
    """`python -m APP` with `overrides`, to its end or `timeout` seconds (then killed: exit code -9)."""
    return run_app_acting_at(run_dir, {}, *overrides, timeout=timeout, app=app)


def run_app_acting_at(
    run_dir: Path,
    actions: dict[int | str, Callable[[subprocess.Popen], None]],
    *overrides: str,
    timeout: int = 600,
    app: str = "apps.grpo",
) -> AppRun:
    """Like run_app, but calls `actions[k](process)` as soon as the app prints step k (an int k),
    or a line containing k (a str k: "meshes up").

    The app runs in a session of its own, so `os.killpg(process.pid, SIGINT)` acts
    like Ctrl-C in a terminal. After `timeout` seconds its process group (the app and its procs)
    is killed and the output says so: a hung run fails its test with what it printed so far.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", app, *hydra_command_line(run_dir, overrides)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines, acted_at = [], {}

    def kill() -> None:
        lines.append(f"\n[run_app: no exit after {timeout} s; killed the app's process group]\n")
        os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    assert proc.stdout is not None  # stdout=PIPE
    try:
        for line in proc.stdout:
            lines.append(line)
            for trigger, action in actions.items():
                if trigger not in acted_at and _triggers(trigger, line):
                    acted_at[trigger] = time.monotonic()
                    action(proc)
        proc.wait()
    finally:
        watchdog.cancel()
    return AppRun(proc.returncode, "".join(lines), run_dir, acted_at, time.monotonic())


def _triggers(trigger: int | str, line: str) -> bool:
    if isinstance(trigger, int):
        return line.startswith(f"step {trigger:4d}/")
    return trigger in line


def hydra_command_line(run_dir: Path, overrides: tuple[str, ...]) -> list[str]:
    """Hydra's flags (`--config-name=grpo_long`) first: none may follow an override."""
    flags = [o for o in overrides if o.startswith("--")]
    return [*flags, f"hydra.run.dir={run_dir}", *(o for o in overrides if not o.startswith("--"))]
