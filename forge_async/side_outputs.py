"""Files a run writes beside its training, which it reports but never dies of.

metrics.jsonl, trace.json, summary.json, plots.png, procs.json and the final model
are written as the run goes or at its end. A write that fails (a full disk, a lost
mount) is reported once per output, on stderr, and the run goes on without it: the
training state that matters is in the checkpoints, whose failures end the run cleanly
(checkpoint/checkpointer.py).
"""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_reported: set[str] = set()


def write_side_output(name: str, write: Callable[[], T]) -> T | None:
    """`write()`'s result, or None if it failed with an OSError (reported, once per `name`)."""
    try:
        return write()
    except OSError as err:
        report_side_output_failure(name, err)
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

    return write_side_output(path.name, write) is not None


def report_side_output_failure(name: str, err: OSError | str) -> None:
    if name in _reported:
        return
    _reported.add(name)
    reason = err.strerror or str(err) if isinstance(err, OSError) else err
    print(f"warning: {name} not written ({reason}); the run goes on without it", file=sys.stderr, flush=True)
