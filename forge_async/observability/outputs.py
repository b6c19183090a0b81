"""Files a run writes beside its training, which it reports but never dies of, but for a full disk.

metrics.jsonl, trace.json, summary.json, plots.png, procs.json and the final model
are written as the run goes or at its end. A write that fails (a lost mount, a
permission) is reported once per output, on stderr, and the run goes on without it: the
training state that matters is in the checkpoints, whose failures end the run cleanly
(checkpoint/checkpointer.py). A write that finds the disk full is noted instead
(process/disk_full.py): the run then ends after its step in flight, with that one line.
"""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from forge_async.process import disk_full

T = TypeVar("T")

_reported: set[str] = set()


def write_side_output(path: Path, write: Callable[[], T]) -> T | None:
    """`write()`'s result, or None if it failed with an OSError (reported, once per output `path`)."""
    try:
        return write()
    except OSError as err:
        report_side_output_failure(path, err)
        return None


def replace_text(path: Path, text: str) -> bool:
    """`path` replaced by `text`, whole (a temporary file renamed over it): False if it could not
    be written (reported once; the temporary file removed, the old `path` left as it was)."""
    tmp = path.with_name(f".{path.name}.tmp")

    def write() -> bool:
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        return True

    return write_side_output(path, write) is not None


def report_side_output_failure(path: Path, err: OSError | str) -> None:
    """`path` not written because of `err`: a full disk is noted (process/disk_full.py), anything else
    warned of once."""
    if disk_full.is_disk_full(err):
        disk_full.note(path)
        return
    if path.name in _reported:
        return
    _reported.add(path.name)
    reason = err.strerror or str(err) if isinstance(err, OSError) else err
    print(f"warning: {path.name} not written ({reason}); the run goes on without it", file=sys.stderr, flush=True)
