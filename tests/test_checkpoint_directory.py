"""Whole-run checkpoint directories: atomic commit, pruning, validation, resume config."""

import errno
import json

import pytest
from omegaconf import OmegaConf

from forge_async.checkpoint.directory import CheckpointDirectory, NoCheckpointError, step_of
from forge_async.controller.resume import resumed_config
from forge_async.errors import ConfigError

pytestmark = pytest.mark.unit


def write_checkpoint(directory: CheckpointDirectory, step: int, payload: bytes = b"weights"):
    with directory.writing(step) as staging:
        (staging / "trainer").mkdir()
        (staging / "trainer" / "__0_0.distcp").write_bytes(payload)
        (staging / "controller.pt").write_bytes(b"state")
        return directory.commit(staging)


def test_commit_renames_and_keeps_the_newest(tmp_path):
    directory = CheckpointDirectory(tmp_path, keep=2)
    for step in (5, 10, 15):
        path = write_checkpoint(directory, step)
        assert path.name == f"step_{step:06d}" and not path.with_suffix(".tmp").exists()
    assert [step_of(p) for p in directory.complete()] == [15, 10]
    manifest = json.loads((directory.complete()[0] / "manifest.json").read_text())
    assert manifest == {"controller.pt": 5, "trainer/__0_0.distcp": 7}


def test_half_written_and_corrupt_checkpoints_are_skipped(tmp_path, capsys):
    directory = CheckpointDirectory(tmp_path, keep=3)
    write_checkpoint(directory, 5)
    newest = write_checkpoint(directory, 10)
    (newest / "trainer" / "__0_0.distcp").write_bytes(b"trunc")  # damaged after the fact
    half = directory.root / "step_000015.tmp"  # a crash while writing step 15: never renamed
    half.mkdir()
    (half / "controller.pt").write_bytes(b"partial")
    assert step_of(directory.latest_valid()) == 5
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step_000010" in err and "__0_0.distcp" in err


def test_a_write_that_fails_leaves_nothing_of_its_step_and_the_last_good_one_intact(tmp_path):
    directory = CheckpointDirectory(tmp_path, keep=2)
    good = write_checkpoint(directory, 5)
    with pytest.raises(OSError, match="No space left"):
        with directory.writing(10) as staging:
            (staging / "controller.pt").write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in directory.root.iterdir()) == ["step_000005"]
    assert directory.latest_valid() == good


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(NoCheckpointError, match="no complete checkpoint"):
        CheckpointDirectory(tmp_path, keep=2).latest_valid()


def test_resume_takes_the_saved_config_and_only_harmless_overrides(tmp_path):
    (tmp_path / "config.yaml").write_text("steps: 10\nseed: 3\ntrainer:\n  lr: 0.001\nresume: null\n")
    current = OmegaConf.create({"steps": 40, "seed": 0, "trainer": {"lr": 0.5}})
    config = resumed_config(tmp_path, [f"resume={tmp_path}", "steps=40"], current)
    assert config.steps == 40 and config.seed == 3 and config.trainer.lr == 0.001
    assert config.resume == str(tmp_path)
    with pytest.raises(ConfigError, match="trainer.lr: cannot be changed when resuming"):
        resumed_config(tmp_path, [f"resume={tmp_path}", "trainer.lr=0.5"], current)
    with pytest.raises(ConfigError, match="no config.yaml"):
        resumed_config(tmp_path / "elsewhere", [], current)
