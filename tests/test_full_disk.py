"""A full disk, wherever the run writes: one line naming the path and the room left, exit status 1,
no traceback, the last good checkpoint intact.

End to end on a real small filesystem (a tmpfs the test mounts, as root) that the test fills
while the run goes on; tests/test_survival.py has the case of a checkpoint too big for the room left.
"""

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from forge_async.cli.subprocess_run import run_app_acting_at
from tests.support.app_runs import resume_line
from forge_async.process import disk_full
from forge_async.observability import outputs as side_outputs
from forge_async.checkpoint.checkpointer import CONTROLLER_FILE
from forge_async.checkpoint.directory import CheckpointDirectory
from forge_async.observability.outputs import write_side_output

pytestmark = pytest.mark.unit


def fill(directory: Path, leave: int = 0) -> None:
    """Take every byte left on `directory`'s filesystem but about `leave`."""
    with open(directory / "filler", "wb", buffering=0) as filler:
        for block in (1 << 16, 512):
            try:
                while shutil.disk_usage(directory).free - block >= leave:
                    filler.write(bytes(block))
            except OSError as err:
                assert err.errno == errno.ENOSPC


@pytest.mark.e2e
def test_a_disk_filling_up_mid_run_ends_it_with_one_line_and_the_last_checkpoint_intact(small_disk):
    run_dir = small_disk / "run"
    # checkpoints at steps 3 and 6: step 5's row or step 6's, each written before step 6's checkpoint, fails first
    run = run_app_acting_at(
        run_dir, {4: lambda proc: fill(small_disk)}, "steps=30", "checkpoint.every_steps=3", timeout=300
    )
    assert run.returncode == 1, run.output
    assert "Traceback" not in run.output and "not written" not in run.output, run.output
    failure = [line for line in run.output.splitlines() if "no space left" in line.lower()]
    assert failure == [
        f"stopped early: no space left on device writing {run_dir / 'metrics.jsonl'} (0.0 MiB free on {small_disk})"
    ], run.output
    assert resume_line("apps.grpo", run_dir) in run.output
    last_good = CheckpointDirectory(run_dir, keep=2).latest_valid()  # every file as its manifest says
    assert last_good.name == "step_000003"
    assert torch.load(last_good / CONTROLLER_FILE, weights_only=False)["step"] == 3
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_000003"]  # no half-written one
    assert not (run_dir / "final_model").exists() and not (run_dir / "plots.png").exists()  # none half-written


@pytest.mark.e2e
def test_a_checkpoint_that_does_not_fit_ends_the_run_and_the_final_policy_that_does_not_either_is_no_traceback(
    small_disk,
):
    """The case first reported: the checkpoint finds too little room and ends the run; then the final
    policy's weights fail mid-write (safetensors' SafetensorError), which is no second failure."""
    run_dir = small_disk / "run"
    leave = 64 << 10  # room for the final policy's config.json, not its weights
    run = run_app_acting_at(
        run_dir, {4: lambda proc: fill(small_disk, leave)}, "steps=30", "checkpoint.every_steps=3", timeout=300
    )
    assert run.returncode == 1, run.output
    assert "Traceback" not in run.output and "not written (" not in run.output, run.output
    failure = [line for line in run.output.splitlines() if line.startswith("stopped early: ")]
    assert len(failure) == 1 and failure[0].startswith(
        f"stopped early: checkpoint of step 6 not written to {run_dir / 'checkpoints'}: it needs about "
    ), run.output
    assert failure[0].endswith("MiB free); the last good one is step_000003")
    assert CheckpointDirectory(run_dir, keep=2).latest_valid().name == "step_000003"
    assert not (run_dir / "final_model").exists()  # its config.json was written, then removed with the rest


def test_a_full_disk_is_known_however_it_is_reported(tmp_path):
    assert disk_full.is_disk_full(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    # safetensors' SafetensorError, and a trainer's failed DCP write, carry only the OS's words
    assert disk_full.is_disk_full("Error while serializing: I/O error: No space left on device (os error 28)")
    assert not disk_full.is_disk_full(OSError(errno.EACCES, os.strerror(errno.EACCES)))
    line = disk_full.describe(tmp_path / "not" / "yet" / "there.json")
    assert line.startswith(f"no space left on device writing {tmp_path}/not/yet/there.json (")
    mount = line.rsplit(" MiB free on ", 1)[1].removesuffix(")")
    assert os.path.ismount(mount) and str(tmp_path.resolve()).startswith(mount)


def test_side_outputs_note_the_first_full_disk_silently_and_warn_of_other_failures(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(disk_full, "_first", None)
    monkeypatch.setattr(side_outputs, "_reported", set())

    def no_space() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def no_permission() -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    assert write_side_output(tmp_path / "metrics.jsonl", no_space) is None
    assert write_side_output(tmp_path / "trace.json", no_space) is None  # the first one stays the run's
    assert disk_full.first() == disk_full.describe(tmp_path / "metrics.jsonl")
    assert capsys.readouterr().err == ""
    assert write_side_output(tmp_path / "plots.png", no_permission) is None
    assert capsys.readouterr().err == "warning: plots.png not written (Permission denied); the run goes on without it\n"
