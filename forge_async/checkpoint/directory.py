"""Whole-run checkpoints on disk: written atomically, validated before use, pruned.

    RUN_DIR/checkpoints/step_000050/
        trainer/        model + optimizer, one shard file per FSDP rank (torch.distributed.checkpoint)
        controller.pt   step, version, RNG and prompt-source state, replay buffer episodes, counters
        manifest.json   every file above with its size in bytes; written last

A checkpoint is written under `step_000050.tmp` and renamed when complete, so a
half-written one never carries a final name. On resume the newest checkpoint
whose files all match its manifest is used; any other is skipped with a warning.
"""

import json
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forge_async.errors import UserError

_FINAL = re.compile(r"^step_(\d+)$")
MANIFEST = "manifest.json"


class NoCheckpointError(UserError):
    """A run directory with no usable checkpoint to resume from."""


class CheckpointDirectory:
    def __init__(self, run_dir: Path, keep: int):
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep

    @contextmanager
    def writing(self, step: int) -> Iterator[Path]:
        """A fresh, empty directory to write the checkpoint of `step` into; removed if the
        block raises (a half-written checkpoint never stays on disk)."""
        path = self.root / f"step_{step:06d}.tmp"
        shutil.rmtree(path, ignore_errors=True)
        try:
            path.mkdir(parents=True)
            yield path
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise

    def commit(self, staging: Path) -> Path:
        """Seal a fully written staging directory under its final name; prune old checkpoints."""
        files = {str(f.relative_to(staging)): f.stat().st_size for f in sorted(staging.rglob("*")) if f.is_file()}
        (staging / MANIFEST).write_text(json.dumps(files, indent=1))
        final = staging.with_suffix("")
        shutil.rmtree(final, ignore_errors=True)  # a checkpoint of this step from a rewound run
        staging.rename(final)
        for old in self.complete()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def complete(self) -> list[Path]:
        """Checkpoints with a final name, newest first (not yet validated)."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _FINAL.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    def latest_valid(self) -> Path:
        """The newest checkpoint whose files match its manifest; warns about each one skipped."""
        for path in self.complete():
            problem = _problem(path)
            if problem is None:
                return path
            print(f"warning: skipping checkpoint {path}: {problem}", file=sys.stderr, flush=True)
        raise NoCheckpointError(f"no complete checkpoint to resume from under {self.root}")


def size_of(checkpoint: Path) -> int:
    """Bytes of every file of a checkpoint."""
    return sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file())


def step_of(checkpoint: Path) -> int:
    named = _FINAL.match(checkpoint.name)
    if named is None:
        raise ValueError(f"{checkpoint}: a checkpoint's directory is named step_<n>")
    return int(named.group(1))


def _problem(path: Path) -> str | None:
    """Why the checkpoint at `path` cannot be used, or None if its files are all there."""
    manifest = path / MANIFEST
    try:
        files = json.loads(manifest.read_text())
    except (OSError, ValueError) as err:
        return f"unreadable {MANIFEST} ({err})"
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, the manifest says {size}"
    return None
