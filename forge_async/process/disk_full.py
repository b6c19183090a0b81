"""A full disk, wherever the run writes: the run ends with one line naming the path and the room left.

    no space left on device writing runs/.../metrics.jsonl (0.0 MiB free on /mnt/runs)

A writer that meets it (an OSError with errno ENOSPC, or an error that carries only the
OS's message: safetensors' SafetensorError, a trainer's failed DCP write) notes the path it
was writing (`note`). The first note is the run's: the training loop stops after the step
in flight, what can still be saved is tried (a checkpoint only ever replaces nothing: the
last good one stays), later notes are silent, and the app reports the first as its failure
(exit status 1). Kept per process: only the controller writes the run's files.
"""

import errno
import os
import shutil
from pathlib import Path

NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"

_first: str | None = None


def is_disk_full(err: BaseException | str) -> bool:
    """Whether `err` (an exception, or a failure's message) is a full disk."""
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    return NO_SPACE in str(err)


def note(path: Path | str) -> None:
    """`path` could not be written for want of space; the first such path is the run's failure."""
    global _first
    if _first is None:
        _first = describe(path)


def first() -> str | None:
    """The line of the first full-disk write the run met, or None."""
    return _first


def describe(path: Path | str) -> str:
    """The one line for a write to `path` that found no space."""
    return f"{NO_SPACE.lower()} writing {path} ({room_at(Path(path))})"


def room_at(path: Path) -> str:
    """The free space of the filesystem `path` is on, and its mount point: "0.4 MiB free on /mnt"."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    mount = existing.resolve()
    while not os.path.ismount(mount):
        mount = mount.parent
    return f"{shutil.disk_usage(existing).free / 2**20:.1f} MiB free on {mount}"
