"""The harness the app tests run the app with: a run that does not end fails its test, with
what it printed, and leaves nothing running."""

import time

import pytest

from forge_async.cli.subprocess_run import run_app

pytestmark = pytest.mark.procs


def gone(pid: int) -> bool:
    """No such process, or only its zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_run_past_its_timeout_is_killed_with_its_children_and_keeps_its_output(tmp_path):
    start = time.monotonic()
    run = run_app(tmp_path / "run", timeout=3, app="tests.sleeping_app")
    assert time.monotonic() - start < 30
    assert run.returncode == -9
    assert "started" in run.output and "no exit after 3 s" in run.output, run.output
    child = int((tmp_path / "run" / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), "the app's child outlived the kill"
