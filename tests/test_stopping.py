"""Every stop has a deadline, and nothing of the run outlives it.

Real app runs, real signals (as Ctrl-C in a terminal, or SIGTERM from Slurm, Kubernetes
or `timeout`): a stalled run stops within checkpoint.stop_grace_s, saving what its last
completed step allows; a second Ctrl-C exits at once and leaves no process of the run
behind, the OpenEnv server it serves included.
"""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from forge_async.cli.subprocess_run import AppRun, run_app_acting_at
from forge_async.process import child_processes
from forge_async.checkpoint.directory import CheckpointDirectory
from forge_async.handles.generators.generator import ANSWER_TIMEOUT_S

pytestmark = pytest.mark.unit

GRACE_S = 5
# Episodes that never end and are never timed out: no drop, so no stall watch trips first.
STALLED = (
    "--config-name=tool_lookup", "env.name=agent:tests.stalled_agent:play", "env.timeout_s=3600",
    "env.agent.episode_timeout_s=3600", f"checkpoint.stop_grace_s={GRACE_S}",
)  # fmt: skip


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` (by parent pid, whatever its session), with its command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                found[child] = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def still_running(pids, within_s: float) -> list[int]:
    """Those of `pids` still alive after up to `within_s` seconds (Monarch's procs take a few to
    notice their controller is gone)."""
    deadline = time.monotonic() + within_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.e2e
def test_sigterm_in_a_stalled_run_ends_within_the_grace_and_saves(tmp_path):
    run_dir = tmp_path / "run"
    sent = {}

    def sigterm_soon(proc) -> None:  # once the workers' first episodes hang in the agent
        def send() -> None:
            sent["at"] = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)

        threading.Timer(3, send).start()

    run = run_app_acting_at(run_dir, {"meshes up": sigterm_soon}, *STALLED, "steps=20", timeout=300)
    assert run.returncode == 128 + signal.SIGTERM, run.output
    assert run.ended_at - sent["at"] < GRACE_S + 10, run.output
    assert "Traceback" not in run.output, run.output
    summary = run.summary
    assert summary["stop_reason"] == "SIGTERM" and summary["steps"] == 0
    assert f"the step in flight was abandoned {GRACE_S} s after SIGTERM" in summary["cut_short"], summary
    assert f"cut short: the step in flight was abandoned {GRACE_S} s after SIGTERM" in run.output
    assert CheckpointDirectory(run_dir, 2).latest_valid().name == "step_000000"
    assert summary["final_model"] and summary["accounting_ok"]


@pytest.mark.e2e
def test_sigterm_with_a_hung_generator_ends_within_the_grace_and_one_unanswered_question(tmp_path):
    """A generator that stops answering (SIGSTOP: alive, silent, as a hung engine): its calls in flight
    are abandoned with the step, the checkpoint waits ANSWER_TIMEOUT_S for its sampler state, and no
    more; it is killed at the end rather than waited for."""
    run_dir = tmp_path / "run"
    sent = {}

    def hang_generator_then_sigterm(proc) -> None:
        generator = AppRun(0, "", run_dir).procs["generator0"]["pid"]
        os.kill(generator, signal.SIGSTOP)
        sent["generator"] = generator
        time.sleep(1)  # the next generate calls are in flight, unanswered
        sent["at"] = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)

    run = run_app_acting_at(
        run_dir, {2: hang_generator_then_sigterm}, "steps=50", f"checkpoint.stop_grace_s={GRACE_S}", timeout=300
    )
    assert run.returncode == 128 + signal.SIGTERM, run.output
    assert run.ended_at - sent["at"] < GRACE_S + ANSWER_TIMEOUT_S + 10, run.output
    assert "generator 0 did not answer within" in run.output
    summary = run.summary
    assert summary["steps"] >= 2
    assert f"the step in flight was abandoned {GRACE_S} s after SIGTERM" in summary["cut_short"]
    last = CheckpointDirectory(run_dir, 2).latest_valid()
    assert last.name == f"step_{summary['steps']:06d}"
    assert still_running([sent["generator"]], within_s=10) == []


@pytest.mark.e2e
def test_a_trainer_still_in_its_step_at_the_deadline_is_neither_checkpointed_nor_saved(tmp_path):
    """Its state is past the last completed step (it goes on with the step on its own): a checkpoint
    of the record's step taken from it would not be that step's."""
    run_dir = tmp_path / "run"

    def hang_trainer_then_sigterm(proc) -> None:
        os.kill(AppRun(0, "", run_dir).procs["trainer"][0]["pid"], signal.SIGSTOP)
        time.sleep(1)  # the next step's train_and_push call is in flight, unanswered
        os.killpg(proc.pid, signal.SIGTERM)

    run = run_app_acting_at(
        run_dir, {2: hang_trainer_then_sigterm}, "steps=50", f"checkpoint.stop_grace_s={GRACE_S}", timeout=300
    )
    assert run.returncode == 128 + signal.SIGTERM, run.output
    summary = run.summary
    step = summary["steps"]
    assert summary["cut_short"] == [
        f"the step in flight was abandoned {GRACE_S} s after SIGTERM",
        f"no checkpoint written: the trainer was still in step {step + 1}, past step {step}",
        "no final policy saved: the trainer was still in its step",
    ], run.output
    assert not (run_dir / "checkpoints").exists() and summary["final_model"] is None


@pytest.mark.e2e
def test_a_second_ctrl_c_leaves_no_process_of_the_run(tmp_path):
    run_dir = tmp_path / "run"
    before: dict[int, str] = {}

    def ctrl_c_twice(proc) -> None:
        before.update(descendants(proc.pid))
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.05)  # the first one's stop is under way: it saves after the step in flight
        os.killpg(proc.pid, signal.SIGINT)

    run = run_app_acting_at(run_dir, {2: ctrl_c_twice}, "--config-name=tool_lookup_openenv", "steps=50", timeout=300)
    assert run.returncode == 128 + signal.SIGINT, run.output
    assert "SIGINT again: exiting now, without saving" in run.output, run.output
    servers = [pid for pid, command in before.items() if "uvicorn" in command]
    assert servers, before  # the OpenEnv server the run serves, in a session of its own
    assert still_running(before, within_s=30) == [], {p: before[p] for p in before if alive(p)}


@pytest.mark.e2e
def test_a_controller_killed_outright_leaves_no_process_of_the_run(tmp_path):
    """SIGKILL (the OOM killer's) runs no handler of the controller's: the OpenEnv server it serves
    is told by the kernel, and Monarch's procs notice their controller is gone."""
    before: dict[int, str] = {}

    def kill_the_controller(proc) -> None:
        before.update(descendants(proc.pid))
        os.kill(proc.pid, signal.SIGKILL)  # the controller alone, as the OOM killer does

    run = run_app_acting_at(
        tmp_path / "run", {2: kill_the_controller}, "--config-name=tool_lookup_openenv", "steps=50", timeout=300
    )
    assert run.returncode == -signal.SIGKILL, run.output
    assert any("uvicorn" in command for command in before.values()), before
    assert still_running(before, within_s=30) == [], {p: before[p] for p in before if alive(p)}


@pytest.mark.e2e
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_during_start_up_leaves_no_process_of_the_run(tmp_path, sigint):
    """Before the training loop takes signals, SIGTERM is taken as Ctrl-C: the start is cancelled and
    what was started stopped on the way out, where by default the process would die on the spot.
    Also for a run that inherits SIGINT ignored, as a script's background job does."""
    before: dict[int, str] = {}

    def sigterm(proc) -> None:
        before.update(descendants(proc.pid))
        os.killpg(proc.pid, signal.SIGTERM)

    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    try:
        run = run_app_acting_at(
            tmp_path / "run", {"OpenEnv server": sigterm}, "--config-name=tool_lookup_openenv", timeout=300
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert run.returncode == 128 + signal.SIGINT and "interrupted during start-up" in run.output, run.output
    assert any("uvicorn" in command for command in before.values()), before
    assert still_running(before, within_s=30) == [], {p: before[p] for p in before if alive(p)}


def test_kill_all_ends_a_registered_process_group():
    child = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60"], start_new_session=True)
    time.sleep(0.2)  # the shell's own child started
    group = [*descendants(child.pid), child.pid]
    child_processes.register(child.pid)
    try:
        child_processes.kill_all()
        child.wait(timeout=10)
        assert still_running(group, within_s=5) == []
    finally:
        child_processes.unregister(child.pid)
