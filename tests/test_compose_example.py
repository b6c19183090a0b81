"""docs/compose.md's script runs as written: it is docs/examples/compose_meshes.py, syncs weights
every step, keeps its procs' output in log files (a console as quiet as the apps'), and leaves
nothing behind when it ends, by itself or on Ctrl-C: no process, no /dev/shm entry. A
Composition refuses bad settings in one line before any proc starts."""

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from forge_async.cli.subprocess_run import REPO
from forge_async.compose import Composition, ConfigError, LearnerSpec, TrainerConfig, WeightsConfig
from forge_async.handles import meshes
from forge_async.weights import scratch
from forge_async.weights.config import default_root

pytestmark = pytest.mark.unit

DOC = REPO / "docs" / "compose.md"
EXAMPLE = REPO / "docs" / "examples" / "compose_meshes.py"
STEP = re.compile(r"step (\d): reward [\d.]+, loss \S+, trainer v(\d), generator now v(\d)")
RUN_S = 420  # a bound on one run of the script on a loaded 2-core box (about a minute when quiet)


def docs_script() -> str:
    """The first python block of docs/compose.md: the script it shows."""
    found = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, "docs/compose.md shows no python block"
    return found.group(1)


def test_the_docs_script_is_the_example():
    assert docs_script() == EXAMPLE.read_text()


class Leftovers:
    """What a script run leaves behind: processes that inherited its marker (Monarch's procs
    inherit their controller's environment) and scratch directories under /dev/shm that appeared
    during the run and are its or nobody's (another run's, alive on this box, is not)."""

    def __init__(self) -> None:
        self.marker = uuid.uuid4().hex
        self.before = set(default_root().glob(f"{scratch.PREFIX}*"))

    def env(self) -> dict[str, str]:
        return {**os.environ, "FORGE_ASYNC_TEST_MARKER": self.marker, "PYTHONUNBUFFERED": "1"}

    def processes(self) -> list[int]:
        marked = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if f"FORGE_ASYNC_TEST_MARKER={self.marker}".encode() in environ.read_bytes():
                    marked.append(int(environ.parent.name))
            except OSError:  # ended meanwhile, or another user's
                continue
        return marked

    def scratch_dirs(self, pid: int) -> list[Path]:
        new = set(default_root().glob(f"{scratch.PREFIX}*")) - self.before
        return sorted(d for d in new if (owner := scratch.owner_of(d)) is None or owner.pid == pid)

    def assert_none(self, pid: int) -> None:
        deadline = time.monotonic() + 15  # the procs' own exit after their stop
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert left == [], f"processes of the script still running: {left}"
        assert self.scratch_dirs(pid) == [], "the script left its scratch directory"


def write_script(tmp_path: Path) -> Path:
    script = tmp_path / "compose_meshes.py"
    script.write_text(docs_script())
    return script


@pytest.mark.e2e
def test_the_docs_script_runs_and_leaves_nothing_behind(tmp_path):
    leftovers = Leftovers()
    args = [sys.executable, str(write_script(tmp_path)), "--steps", "2", "--trainer-procs", "2"]
    proc = subprocess.Popen(
        [*args, "--log-dir", str(tmp_path / "logs")],
        cwd=tmp_path,
        env=leftovers.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    assert STEP.findall(out) == [("1", "1", "1"), ("2", "2", "2")], out
    for noise in ("WARNING", "Warning", "leaked semaphore", "Triton", "deprecated", "Traceback"):
        assert noise not in out + err, out + err
    assert "vllm" in (tmp_path / "logs" / "generator0.log").read_text().lower()  # vLLM's output is kept there
    leftovers.assert_none(proc.pid)


@pytest.mark.e2e
def test_ctrl_c_stops_every_proc_and_removes_the_channel(tmp_path):
    leftovers = Leftovers()
    args = [sys.executable, str(write_script(tmp_path)), "--steps", "1000", "--trainer-procs", "2"]
    proc = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=leftovers.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job has
    )
    bound = threading.Timer(RUN_S, proc.kill)  # a script that never gets to its first step ends here
    bound.start()
    try:
        seen = []
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("step 1:"):
                break
        assert seen and seen[-1].startswith("step 1:"), "".join(seen) + proc.stderr.read()
        running = leftovers.processes()
        assert len(running) >= 5, running  # the script, 2 trainer ranks, the generator, the buffer
        assert len(leftovers.scratch_dirs(proc.pid)) == 1  # its channel, while it runs
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in its terminal: to the script and its procs
        out, err = proc.communicate(timeout=120)
    finally:
        bound.cancel()
        proc.kill()
    assert proc.returncode == 130 and err.rstrip().endswith("interrupted"), out + err
    leftovers.assert_none(proc.pid)


def test_a_composition_refuses_bad_settings_before_any_proc_starts(monkeypatch):
    """Refused in the caller, as one ConfigError naming the setting; the block's scratch directory
    is removed all the same."""
    monkeypatch.delenv(scratch.OWNER_ENV, raising=False)  # the composition names this process its owner
    decaying = LearnerSpec("unused", TrainerConfig(lr_schedule="linear"), pad_id=0)

    async def compose() -> Composition:
        async with Composition(log_dir=None) as composed:
            owner = scratch.owner_of(composed.channel_dir)
            assert owner is not None and owner.pid == os.getpid()
            with pytest.raises(ConfigError, match="trainer.lr_schedule='linear' needs trainer.lr_total_steps"):
                await composed.spawn_trainer(decaying)
            with pytest.raises(ConfigError, match="replay buffer: capacity must be >= 1"):
                await composed.spawn_replay_buffer(max_policy_age=0, capacity=0)
        return composed

    composed = asyncio.run(compose())
    assert not composed.channel_dir.exists()
    with pytest.raises(RuntimeError, match="spawn inside `async with Composition"):
        asyncio.run(composed.spawn_replay_buffer(max_policy_age=0, capacity=8))
    with pytest.raises(ConfigError, match="weights.channel_dir is null with weights.transport 'shm'"):
        meshes.check_weights(WeightsConfig())  # what meshes.spawn_trainer and spawn_generator check first
    assert meshes.check_weights(WeightsConfig().resolved()) is None
