"""Save and restore a whole run: each part hands over its own state.

The trainer ranks write their model and optimizer shards themselves (DCP, in
`trainer/`); everything the controller side owns goes into `controller.pt`:
the loop's record, prompt-source position and metrics smoothing, the replay
buffer's episodes and counters (taken in one call, so they agree), and each
generator's sampler RNG state (with those, a sync-mode run resumes bit for bit).
"""

import time
from pathlib import Path

import torch

from forge_async.checkpoint.directory import CheckpointDirectory
from forge_async.handles.run import RunHandles

CONTROLLER_FILE = "controller.pt"
TRAINER_DIR = "trainer"


class Checkpointer:
    def __init__(self, run_dir: Path, keep: int):
        self.directory = CheckpointDirectory(run_dir, keep)

    async def save(self, step: int, loop_state: dict, handles: RunHandles) -> dict:
        """Write the checkpoint of `step`; returns where it went and how long it took."""
        start = time.perf_counter()
        staging = self.directory.staging(step)
        await handles.trainer.save_state(str(staging / TRAINER_DIR))
        state = {
            "step": step,
            "loop": loop_state,
            "buffer": await handles.buffer.state_dict(),
            "generator_rng": await handles.generators.rng_states(),
        }
        torch.save(state, staging / CONTROLLER_FILE)
        path = self.directory.commit(staging)
        return {
            "path": str(path),
            "seconds": time.perf_counter() - start,
            "bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
        }

    @staticmethod
    async def restore(path: Path, handles: RunHandles) -> dict:
        """Load the checkpoint at `path` into the actors; returns the loop's state."""
        await handles.trainer.load_state(str(path / TRAINER_DIR))
        state = torch.load(path / CONTROLLER_FILE, weights_only=False)
        await handles.buffer.load_state_dict(state["buffer"])
        # Generator i gets generator i's sampler state back (a sync run then resumes exactly).
        for i, rng in enumerate(state["generator_rng"][: handles.generators.count]):
            if rng is not None:  # None: that generator had failed when the checkpoint was taken
                await handles.generators.set_rng_state(i, rng)
        return state["loop"]
