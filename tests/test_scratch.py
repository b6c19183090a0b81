"""A run's scratch directory: whose it is, and which ones a later start may remove."""

import dataclasses
import json
import os
import subprocess

import pytest

from forge_async.weights import scratch

pytestmark = pytest.mark.unit


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def owned(root, name: str, owner: scratch.Owner | None):
    directory = root / f"{scratch.PREFIX}{name}"
    (directory / "tmp").mkdir(parents=True)
    (directory / "slot0.bin").write_bytes(b"\0" * 64)
    if owner is not None:
        (directory / scratch.OWNER_FILE).write_text(json.dumps(dataclasses.asdict(owner)))
    return directory


def test_a_dead_owners_directory_is_reclaimed_and_a_live_ones_is_not(tmp_path, dead_pid):
    alive = scratch.Owner.of(os.getpid())
    dead = dataclasses.replace(alive, pid=dead_pid)
    reused = dataclasses.replace(alive, started=alive.started - 1)  # our pid, another process's start
    elsewhere = dataclasses.replace(dead, host="another-host")
    directories = {
        "alive": owned(tmp_path, "alive", alive),
        "dead": owned(tmp_path, "dead", dead),
        "reused": owned(tmp_path, "reused", reused),
        "elsewhere": owned(tmp_path, "elsewhere", elsewhere),
        "unowned": owned(tmp_path, "unowned", None),
    }
    other = tmp_path / "not-ours"
    other.mkdir()

    removed = scratch.reclaim(tmp_path)

    assert sorted(removed) == sorted([directories["dead"], directories["reused"]])
    assert not directories["dead"].exists() and not directories["reused"].exists()
    assert all(directories[k].is_dir() for k in ("alive", "elsewhere", "unowned")) and other.is_dir()


def test_a_launcher_removes_the_directories_it_owns(tmp_path):
    me = scratch.Owner.of(os.getpid())
    mine, live_other = owned(tmp_path, "mine", me), owned(tmp_path, "other", scratch.Owner.of(os.getppid()))
    assert scratch.reclaim(tmp_path, owned_by=me) == [mine]
    assert live_other.is_dir()


def test_claim_records_the_owner_named_in_the_environment_once(tmp_path, monkeypatch):
    monkeypatch.setenv(scratch.OWNER_ENV, str(os.getppid()))
    directory = scratch.claim(tmp_path / "forge_async-x")
    assert scratch.owner_of(directory) == scratch.Owner.of(os.getppid())
    monkeypatch.setenv(scratch.OWNER_ENV, str(os.getpid()))
    assert scratch.temporary_files(directory) == directory / "tmp" and (directory / "tmp").is_dir()
    assert scratch.owner_of(directory) == scratch.Owner.of(os.getppid())  # the first claim's owner stays

    monkeypatch.delenv(scratch.OWNER_ENV)
    unowned = scratch.claim(tmp_path / "forge_async-y")
    assert unowned.is_dir() and scratch.owner_of(unowned) is None  # never reclaimed, only removed at its end


def test_a_directory_a_dead_run_left_is_claimed_by_the_next(tmp_path, monkeypatch, dead_pid):
    dead = dataclasses.replace(scratch.Owner.of(os.getpid()), pid=dead_pid)
    left = owned(tmp_path, "my-channel", dead)  # weights.channel_dir of your own, reused
    monkeypatch.setenv(scratch.OWNER_ENV, str(os.getpid()))
    scratch.claim(left)
    assert scratch.owner_of(left) == scratch.Owner.of(os.getpid())
    assert scratch.reclaim(tmp_path) == [] and left.is_dir()
