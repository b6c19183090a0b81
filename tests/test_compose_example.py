"""The documented composition example runs as written, syncs weights every step, and keeps its
procs' output in log files: a console as quiet as the apps', and a clean exit."""

import re
import subprocess
import sys

import pytest

from forge_async.cli.subprocess_run import REPO

pytestmark = pytest.mark.e2e


def test_compose_example_runs(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "docs/examples/compose_meshes.py",
            "--steps",
            "2",
            "--trainer-procs",
            "2",
            "--log-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = re.findall(r"step (\d): reward [\d.]+, loss \S+, trainer v(\d), generator now v(\d)", proc.stdout)
    assert steps == [("1", "1", "1"), ("2", "2", "2")], proc.stdout
    assert "stored policy versions: [2]" in proc.stdout
    console = proc.stdout + proc.stderr
    for noise in ("WARNING", "Warning", "leaked semaphore", "Triton", "deprecated"):
        assert noise not in console, console
    assert "vllm" in (tmp_path / "generator0.log").read_text().lower()  # vLLM's output is kept there
