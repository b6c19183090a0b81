"""Checks on a finished app run (tests that run `python -m apps.<app>`), and actions on a live one."""

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from forge_async.cli.subprocess_run import REPO, AppRun
from forge_async.process.interpreter import python


def resume_line(app: str, run_dir: Path) -> str:
    """The `resume with:` line a run of `app` (run_app's: this interpreter, in REPO) prints."""
    return f"resume with: {python(sys.executable, REPO)} -m {app} resume={run_dir}"


def assert_accounting(summary: dict) -> None:
    parts = ("trained", "dropped_stale", "dropped_other", "left_in_buffer", "in_flight", "lost_in_failed_step")
    assert summary["generated"] == sum(summary[p] for p in parts), summary
    assert summary["accounting_ok"] is True


def assert_finished_dropping(run: AppRun, *reasons: str) -> dict[str, int]:
    """`run` finished, its accounting adds up, and each of `reasons` dropped episodes: printed the
    first time, counted in summary.json. Returns the summary's drops by reason."""
    assert run.returncode == 0, run.output
    for reason in reasons:
        assert f"episode dropped ({reason}): " in run.output, reason
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert_accounting(summary)
    dropped = summary["dropped_by_reason"]
    assert all(dropped.get(reason, 0) > 0 for reason in reasons), dropped
    return dropped


def kill_role(run_dir: Path, role: str, rank: int | None = None) -> Callable[[subprocess.Popen], None]:
    """An action for `run_app_acting_at`: SIGKILL `role`'s proc (the trainer's: rank `rank`), found in procs.json."""

    def action(proc: subprocess.Popen) -> None:
        entry = AppRun(0, "", run_dir).procs[role]
        os.kill((entry if rank is None else entry[rank])["pid"], signal.SIGKILL)

    return action
