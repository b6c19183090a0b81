"""`make grpo` ends as the run does: a Ctrl-C the run handled (it saves, says how to resume, exits
130) is no error of make's, and a failed run still fails make. A stand-in for the interpreter
(`PY=`) plays the run; the virtual environment is taken as made (`-o`)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from forge_async.cli.subprocess_run import REPO

pytestmark = pytest.mark.unit

STAND_IN = """\
import signal, sys, time
def interrupted(*_):
    print("resume with: ...", flush=True)
    sys.exit(130)
signal.signal(signal.SIGINT, interrupted)
print("ready", flush=True)
if sys.argv[-1] == "fail":
    sys.exit(1)
time.sleep(60)
"""


# A user's shell: no make above this one (under `make test`, a nested make would say `make[1]:`).
USERS_SHELL = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}


def make_grpo(tmp_path, *args: str) -> subprocess.Popen:
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!{sys.executable}\n{STAND_IN}")
    stand_in.chmod(0o755)
    return subprocess.Popen(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "grpo", f"PY={stand_in}", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C: SIGINT to the whole process group
        env=USERS_SHELL,
    )


def test_ctrl_c_under_make_grpo_ends_without_an_error_of_makes(tmp_path):
    make = make_grpo(tmp_path)
    assert make.stdout.readline().startswith("trap : INT;")  # the recipe, as make echoes it
    assert make.stdout.readline() == "ready\n"
    time.sleep(0.2)
    os.killpg(make.pid, signal.SIGINT)
    output = make.communicate(timeout=30)[0]
    assert "resume with" in output and "make: ***" not in output, output
    assert make.returncode == -signal.SIGINT  # make itself was interrupted, and says nothing of it


def test_a_failed_run_fails_make(tmp_path):
    make = make_grpo(tmp_path, "ARGS=fail")
    output = make.communicate(timeout=30)[0]
    assert make.returncode == 2 and "make: ***" in output and "Error 1" in output, output
