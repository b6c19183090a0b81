"""Runs that survive: interrupt + exact resume, generator and buffer crashes, trainer crashes.

Real procs, real signals: the app runs in a subprocess in its own session, and the
test sends SIGINT to its process group (as Ctrl-C in a terminal would) or SIGKILL to
a proc it finds in procs.json.
"""

import json
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from forge_async.cli.subprocess_run import AppRun, run_app, run_app_acting_at
from forge_async.handles.trainer import failed_rank
from forge_async.weights import scratch
from forge_async.weights.config import default_root
from tests.support.app_runs import assert_accounting, kill_role, resume_line
from tests.support.doc_blocks import assert_console_as_documented

pytestmark = pytest.mark.unit

SYNC = ("mode=sync", "steps=12", "checkpoint.every_steps=3")


def interrupt(proc) -> None:
    os.killpg(proc.pid, signal.SIGINT)


def scratch_left_by(run: AppRun) -> list[Path]:
    """Scratch directories (weights/scratch.py) that `run`'s controller owns and left behind."""
    pid = run.procs["controller"]["pid"]
    return [d for d in default_root().glob("forge_async-*") if getattr(scratch.owner_of(d), "pid", None) == pid]


def final_weights(run: AppRun) -> dict:
    return load_file(str(run.run_dir / "final_model" / "model.safetensors"))


def assert_each_step_once(run: AppRun, steps: int) -> None:
    assert [m["step"] for m in run.metrics] == list(range(1, steps + 1))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
def test_interrupted_sync_run_resumes_exactly_even_past_a_corrupt_checkpoint(tmp_path):
    straight = run_app(tmp_path / "straight", *SYNC)
    assert straight.returncode == 0, straight.output

    # Sync mode with a fixed seed is reproducible bit for bit: a second run learns the same.
    again = run_app(tmp_path / "again", *SYNC)
    assert [m["reward/mean"] for m in again.metrics] == [m["reward/mean"] for m in straight.metrics]
    expected, got = final_weights(straight), final_weights(again)
    assert all((expected[name] == got[name]).all() for name in expected)

    run_dir = tmp_path / "interrupted"
    stopped = run_app_acting_at(run_dir, {5: interrupt}, *SYNC)
    assert stopped.returncode == 128 + signal.SIGINT, stopped.output
    assert stopped.ended_at - stopped.acted_at[5] < 15
    assert resume_line("apps.grpo", run_dir) in stopped.output
    assert_console_as_documented(stopped.output, "ctrl_c")  # docs/checkpoints.md
    summary = stopped.summary
    assert summary["interrupted"] is True and summary["stop_reason"] == "SIGINT"
    assert 5 <= summary["steps"] < 12 and summary["final_model"]
    assert_accounting(summary)
    assert not any(alive(p["pid"]) for p in [*stopped.procs["trainer"], stopped.procs["generator0"]])
    assert scratch_left_by(stopped) == []

    # The checkpoint written on interrupt is damaged: resume falls back to step 3.
    newest = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    shard = next((newest / "trainer").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    resumed = run_app(run_dir, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.output
    assert f"skipping checkpoint {newest}" in resumed.output
    assert "resumed from" in resumed.output and "at step 3 " in resumed.output
    assert_each_step_once(resumed, 12)
    assert_accounting(resumed.summary)
    assert resumed.summary["steps"] == 12 and resumed.summary["trained"] == 12 * 128

    # Bit for bit what the uninterrupted run learned, sample for sample.
    assert [m["reward/mean"] for m in resumed.metrics] == [m["reward/mean"] for m in straight.metrics]
    expected, got = final_weights(straight), final_weights(resumed)
    assert all((expected[name] == got[name]).all() for name in expected)


@pytest.mark.e2e
def test_generator_and_buffer_killed_mid_run_the_run_goes_on_and_learns(tmp_path):
    run_dir = tmp_path / "run"
    actions = {8: kill_role(run_dir, "generator0"), 22: kill_role(run_dir, "replay_buffer")}
    run = run_app_acting_at(
        run_dir,
        actions,
        "steps=40",
        "checkpoint.every_steps=0",
        "trainer.lr_schedule=constant",  # the default decays the lr over the last half of the run
    )
    assert run.returncode == 0, run.output
    assert_each_step_once(run, 40)
    summary = run.summary
    assert summary["generator_restarts"] == 1 and summary["lost_requests"] > 0
    assert "buffer_lost" in summary["dropped_by_reason"]
    assert_accounting(summary)
    assert "generator 0 back in" in run.output
    rewards = [m["reward/mean"] for m in run.metrics]
    assert statistics.fmean(rewards[-8:]) - statistics.fmean(rewards[:8]) > 0.08, rewards


@pytest.mark.e2e
def test_killed_trainer_rank_stops_the_run_naming_it_and_resume_finishes(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ("steps=12", "trainer.procs=2", "checkpoint.every_steps=4")
    killed = run_app_acting_at(run_dir, {6: kill_role(run_dir, "trainer", rank=1)}, *overrides)
    pid = killed.procs["trainer"][1]["pid"]
    assert killed.returncode == 1, killed.output
    assert killed.ended_at - killed.acted_at[6] < 60
    assert f"trainer rank 1 (pid {pid} on" in killed.output
    assert "Traceback" not in killed.output
    summary = killed.summary
    assert summary["failure"].startswith("trainer rank 1") and summary["final_model"] is None
    assert_accounting(summary)
    procs = killed.procs
    assert not any(alive(p["pid"]) for p in [*procs["trainer"], procs["generator0"], procs["replay_buffer"]])
    assert scratch_left_by(killed) == []

    refused = run_app(run_dir, f"resume={run_dir}", "trainer.lr=0.5", timeout=120)
    assert refused.returncode == 2 and "trainer.lr: cannot be changed when resuming" in refused.output

    resumed = run_app(run_dir, f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.output
    assert "at step 4 " in resumed.output
    assert_each_step_once(resumed, 12)
    assert_accounting(resumed.summary)


class KillTrainerOnceRespawned(threading.Thread):
    """SIGKILLs the trainer's rank 0 as soon as procs.json names a pid other than `old_pid`.

    A resumed run records each role in procs.json as it comes up; the trainer gets no call
    after that until the run restores its checkpoint (the trainer's shards first), once every
    role is up. A kill as soon as the new trainer is recorded therefore always surfaces in the
    restore, however slowly the other roles start. The test checks that the restore never
    finished.
    """

    def __init__(self, run_dir, old_pid: int):
        super().__init__(daemon=True)
        self.path, self.old_pid = run_dir / "procs.json", old_pid
        self.done = threading.Event()
        self.pid: int | None = None
        self.killed_at = 0.0

    def run(self) -> None:
        while not self.done.wait(0.005):
            try:
                pid = json.loads(self.path.read_text())["trainer"][0]["pid"]
            except (OSError, ValueError, KeyError):
                continue
            if pid != self.old_pid:
                os.kill(pid, signal.SIGKILL)
                self.pid, self.killed_at = pid, time.monotonic()
                return


@pytest.mark.e2e
def test_trainer_killed_during_resume_ends_with_the_one_line_failure_and_the_resume_hint(tmp_path):
    run_dir = tmp_path / "run"
    # A constant lr: the default linear decay spans the first run's steps and refuses more on resume.
    first = run_app(run_dir, "mode=sync", "steps=2", "checkpoint.every_steps=2", "trainer.lr_schedule=constant")
    assert first.returncode == 0, first.output
    assert (run_dir / "checkpoints" / "step_000002" / "manifest.json").is_file()

    killer = KillTrainerOnceRespawned(run_dir, first.procs["trainer"][0]["pid"])
    killer.start()
    try:
        killed = run_app(run_dir, f"resume={run_dir}", "steps=4", timeout=120)
    finally:
        killer.done.set()
        killer.join()
    assert killer.pid is not None, killed.output  # the resumed run's trainer came up and was killed
    assert killed.returncode == 1, killed.output
    assert killed.ended_at - killer.killed_at < 60
    assert "resumed from" not in killed.output, killed.output  # the kill landed during the restore
    assert_each_step_once(killed, 2)
    named = [line for line in killed.output.splitlines() if f"trainer rank 0 (pid {killer.pid} on" in line]
    assert len(named) == 1, killed.output
    assert resume_line("apps.grpo", run_dir) in killed.output, killed.output
    assert "Traceback" not in killed.output and "AttributeError" not in killed.output, killed.output
    procs = killed.procs
    assert not any(alive(p["pid"]) for p in [*procs["trainer"], procs["generator0"], procs["replay_buffer"]])

    # The failed resume left the run as it was: the hint's command finishes it.
    resumed = run_app(run_dir, f"resume={run_dir}", "steps=4")
    assert resumed.returncode == 0, resumed.output
    assert "at step 2 " in resumed.output
    assert_each_step_once(resumed, 4)
    assert_accounting(resumed.summary)


def run_leftovers() -> set[str]:
    """What runs keep on this host outside their run directory: scratch directories (in memory)
    and temporary files (vLLM's rendezvous file once went to /tmp)."""
    return {str(p) for p in default_root().iterdir()} | {
        str(p) for p in Path(tempfile.gettempdir()).glob("vllm_dist_*")
    }


def kill_controller(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)


@pytest.mark.e2e
def test_a_sigkilled_controllers_scratch_is_reclaimed_by_the_next_run_and_nothing_is_left(tmp_path):
    before = run_leftovers()
    killed = run_app_acting_at(tmp_path / "killed", {3: kill_controller}, "steps=200", "checkpoint.every_steps=0")
    assert killed.returncode == -signal.SIGKILL, killed.output
    procs = killed.procs
    deadline = time.monotonic() + 60  # Monarch stops a dead controller's procs
    while any(alive(p["pid"]) for p in [*procs["trainer"], procs["generator0"]]) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = run_leftovers() - before
    assert [Path(p).name.startswith("forge_async-") for p in left] == [True], left  # its scratch, nothing else
    orphan = Path(left.pop())
    assert json.loads((orphan / "owner.json").read_text())["pid"] == procs["controller"]["pid"]

    following = run_app(tmp_path / "following", "steps=2", "eval.every_steps=0")
    assert following.returncode == 0, following.output
    assert f"removed {orphan}: its run ended without removing it" in following.output
    assert run_leftovers() == before


@pytest.mark.e2e
def test_a_full_disk_ends_the_run_with_one_line_and_leaves_it_resumable(small_disk, tmp_path):
    run_dir = small_disk / "run"
    full = run_app(run_dir, "steps=200", "checkpoint.every_steps=20", "eval.every_steps=0", timeout=300)
    assert full.returncode == 1, full.output
    assert "Traceback" not in full.output and "proc failure" not in full.output, full.output
    failure = [line for line in full.output.splitlines() if line.startswith("stopped early: ")]
    assert failure == [
        f"stopped early: checkpoint of step 40 not written to {run_dir / 'checkpoints'}: it needs about "
        + failure[0].split("it needs about ")[1]
    ], full.output
    assert "MiB free); the last good one is step_000020" in failure[0]
    assert resume_line("apps.grpo", run_dir) in full.output
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000020"]
    assert not list(run_dir.glob(".*.tmp"))  # no half-written side output left behind

    moved = tmp_path / "moved"  # the user frees space: here, the run directory moves to a larger disk
    shutil.copytree(run_dir, moved)
    resumed = run_app(moved, f"resume={moved}", "steps=22")
    assert resumed.returncode == 0, resumed.output
    assert "at step 20 " in resumed.output
    assert_each_step_once(resumed, 22)


@pytest.mark.e2e
def test_generator_failing_past_max_restarts_stops_the_run_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    actions = {4: kill_role(run_dir, "generator0")}
    run = run_app_acting_at(run_dir, actions, "steps=30", "generator.max_restarts=0")
    assert run.returncode == 1, run.output
    summary = run.summary
    assert "generator 0" in summary["failure"] and "generator.max_restarts=0" in summary["failure"]
    assert 4 <= summary["steps"] < 30 and summary["final_model"]
    assert_accounting(summary)
    assert (run_dir / "checkpoints" / f"step_{summary['steps']:06d}" / "manifest.json").is_file()
    assert resume_line("apps.grpo", run_dir) in run.output


def test_failed_trainer_rank_is_named_from_either_form_of_monarchs_report():
    exited = "Endpoint call trainer.train_step() failed ... {'hosts': 1/2, 'procs': 0/2} ... exited"
    silent = (
        "Endpoint call trainer.train_step() failed, The actor trainer-3<B4U5LbqhcaG>@trainer-3<B4U5LbqhcaG>"
        ".ipc://@U7km1hrmevpp3Jx3W7Y0WULj,proc_agent and all its descendants have failed:\n  timeout waiting "
        'for message from proc mesh agent while querying for "trainer-yPf2ZLUznKd". The process likely crashed'
    )
    assert failed_rank(exited) == 2
    assert failed_rank(silent) == 3
    assert failed_rank("something else entirely") is None
