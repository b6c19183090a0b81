"""Save and restore a whole run: each part hands over its own state.

The trainer ranks write their model and optimizer shards themselves (DCP, in
`trainer/`); everything the controller side owns goes into `controller.pt`:
the loop's counters and prompt-source position, the replay buffer's episodes
and counters (taken in one call, so they agree), and each generator's sampler
RNG state (with those, a sync-mode run resumes bit for bit).
"""

import time
from pathlib import Path

import torch

from forge_async.checkpoint.directory import CheckpointDirectory
from forge_async.launch.supervision import RunMeshes

CONTROLLER_FILE = "controller.pt"
TRAINER_DIR = "trainer"


class Checkpointer:
    def __init__(self, run_dir: Path, keep: int):
        self.directory = CheckpointDirectory(run_dir, keep)

    async def save(self, step: int, loop_state: dict, meshes: RunMeshes) -> dict:
        """Write the checkpoint of `step`; returns where it went and how long it took."""
        start = time.perf_counter()
        staging = self.directory.staging(step)
        trainer_dir = str(staging / TRAINER_DIR)
        trainer_save = await meshes.call_trainer(lambda t: t.save_state.call(trainer_dir))
        state = {
            "step": step,
            "loop": loop_state,
            "buffer": await meshes.buffer.state_dict(),
            "generator_rng": await meshes.ask_generators(lambda g: g.rng_state.call_one()),
        }
        torch.save(state, staging / CONTROLLER_FILE)
        path = self.directory.commit(staging)
        return {
            "path": str(path),
            "seconds": time.perf_counter() - start,
            "trainer_seconds": trainer_save["save_ms"] / 1e3,
            "bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
        }

    def latest(self) -> Path:
        return self.directory.latest_valid()

    @staticmethod
    async def restore(path: Path, meshes: RunMeshes) -> dict:
        """Load the checkpoint at `path` into the actors; returns the loop's state."""
        trainer_dir = str(path / TRAINER_DIR)
        await meshes.call_trainer(lambda t: t.load_state.call(trainer_dir))
        state = torch.load(path / CONTROLLER_FILE, weights_only=False)
        await meshes.buffer.load_state_dict(state["buffer"])
        # Generator i gets generator i's sampler state back (a sync run then resumes exactly).
        for i, rng in enumerate(state["generator_rng"][: meshes.generator_count]):
            if rng is not None:  # None: that generator had failed when the checkpoint was taken
                await meshes.call_generator(i, lambda g, rng=rng: g.set_rng_state.call_one(rng))
        return state["loop"]
