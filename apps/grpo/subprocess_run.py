"""Run `python -m apps.grpo` in a subprocess, as a user would, and read its run directory.

Used by the tests and the benchmarks.
"""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class AppRun:
    returncode: int
    output: str
    run_dir: Path

    @property
    def metrics(self) -> list[dict]:
        lines = (self.run_dir / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    @property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


def run_app(run_dir: Path, *overrides: str, timeout: int = 600) -> AppRun:
    proc = subprocess.run(
        [sys.executable, "-m", "apps.grpo", f"hydra.run.dir={run_dir}", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return AppRun(proc.returncode, proc.stdout + proc.stderr, run_dir)
