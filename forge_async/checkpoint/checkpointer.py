"""Save and restore a whole run: each part hands over its own state.

The trainer ranks write their model and optimizer shards themselves (DCP, in
`trainer/`); everything the controller side owns goes into `controller.pt`:
the loop's record, prompt-source position and metrics smoothing, the replay
buffer's episodes and counters (taken in one call, so they agree), and each
generator's sampler RNG state (generation/sampler_rng.py; with those, a sync-mode run resumes
bit for bit).
"""

import io
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from forge_async.process import disk_full
from forge_async.checkpoint.directory import CheckpointDirectory, size_of
from forge_async.handles.run import RunHandles
from forge_async.learning.results import SaveFailed

CONTROLLER_FILE = "controller.pt"
TRAINER_DIR = "trainer"
_MARGIN = 1.1  # free space asked for, over the estimated size of the next checkpoint


class CheckpointNotWritten(RuntimeError):
    """A checkpoint could not be written (a full disk): the run ends, resumable from the last good one."""


@dataclass(frozen=True)
class CheckpointSaved:
    """Where a checkpoint went, how long it took to write, and its size."""

    path: str
    seconds: float
    bytes: int


class Checkpointer:
    def __init__(self, run_dir: Path, keep: int):
        self.directory = CheckpointDirectory(run_dir, keep)

    async def save(self, step: int, loop_state: dict, handles: RunHandles) -> CheckpointSaved:
        """Write the checkpoint of `step`.

        Raises CheckpointNotWritten, with nothing of this step's left on disk, if the filesystem
        has too little room for it or a write fails; earlier checkpoints stay as they were."""
        start = time.perf_counter()
        needed = await self._room_needed(step, handles)
        with self.directory.writing(step) as staging:
            try:
                await self._write(staging, step, loop_state, handles)
                path = self.directory.commit(staging)
            except OSError as err:
                raise self._not_written(step, needed, self._why(staging, err)) from None
        return CheckpointSaved(str(path), time.perf_counter() - start, size_of(path))

    async def _write(self, staging: Path, step: int, loop_state: dict, handles: RunHandles) -> None:
        saved = await handles.trainer.save_state(str(staging / TRAINER_DIR))
        if isinstance(saved, SaveFailed):
            raise OSError(saved.why)
        state = {"step": step, "loop": loop_state, "generator_rng": await handles.generators.rng_states()}
        if handles.buffer is not None:
            state["buffer"] = await handles.buffer.state_dict()
        serialized = io.BytesIO()  # torch.save's own writer reports a full disk as a RuntimeError
        torch.save(state, serialized)
        (staging / CONTROLLER_FILE).write_bytes(serialized.getbuffer())

    async def _room_needed(self, step: int, handles: RunHandles) -> int:
        """The bytes a checkpoint asks to be free: the trainer's state, plus the controller's part
        as large as last time, with a margin. Refuses to start one the filesystem has no room for."""
        newest = self.directory.complete()
        controller = newest[0] / CONTROLLER_FILE if newest else None
        controller_bytes = controller.stat().st_size if controller is not None and controller.is_file() else 0
        needed = int((await handles.trainer.state_bytes() + controller_bytes) * _MARGIN)
        self.directory.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.directory.root).free
        if free < needed:
            raise self._not_written(step, needed, f"{_mib(free)} free")
        return needed

    @staticmethod
    def _why(staging: Path, err: OSError) -> str:
        """What a failed write of the checkpoint in `staging` met: a full disk with the room left, or
        the OS's words."""
        if disk_full.is_disk_full(err):
            return f"{disk_full.NO_SPACE.lower()}; {disk_full.room_at(staging)}"
        return err.strerror or str(err)

    def _not_written(self, step: int, needed: int, why: str) -> CheckpointNotWritten:
        newest = self.directory.complete()
        last_good = f"the last good one is {newest[0].name}" if newest else "there is no earlier one"
        return CheckpointNotWritten(
            f"checkpoint of step {step} not written to {self.directory.root}: it needs about "
            f"{_mib(needed)} ({why}); {last_good}"
        )

    @staticmethod
    async def restore(path: Path, handles: RunHandles) -> dict:
        """Load the checkpoint at `path` into the actors; returns the loop's state."""
        await handles.trainer.load_state(str(path / TRAINER_DIR))
        state = torch.load(path / CONTROLLER_FILE, weights_only=False)
        if handles.buffer is not None:
            await handles.buffer.load_state_dict(state["buffer"])
        # Generator i gets generator i's sampler state back (a sync run then resumes exactly).
        for i, rng in enumerate(state["generator_rng"][: handles.generators.count]):
            if rng is not None:  # None: that generator had failed when the checkpoint was taken
                await handles.generators.set_rng_state(i, rng)
        return state["loop"]


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"
