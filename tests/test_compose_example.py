"""The documented composition example runs as written and syncs weights every step."""

import re
import subprocess
import sys

from apps.grpo.subprocess_run import REPO


def test_compose_example_runs():
    proc = subprocess.run(
        [sys.executable, "docs/examples/compose_meshes.py", "--steps", "2", "--trainer-procs", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = re.findall(r"step (\d): reward [\d.]+, loss \S+, trainer v(\d), generator now v(\d)", proc.stdout)
    assert steps == [("1", "1", "1"), ("2", "2", "2")], proc.stdout
    assert "stored policy versions: [2]" in proc.stdout
