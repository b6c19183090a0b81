"""Ending the controller process without the interpreter's finalisation.

With torch, vLLM and Monarch loaded, Python's own shutdown (module teardown, a
heap-wide collection) takes a noticeable time after the run has written everything it
keeps (docs/benchmarks.md, start-up and teardown). `exit_now` skips it. A launcher that
runs the app in its own process (`python -m forge_async.cluster`) calls
`defer_to_caller()` first: the app's `exit_app` then raises a plain SystemExit, and the
launcher tidies up its node before it calls `exit_now` itself.
"""

import logging
import os
import sys

from forge_async.process import child_processes

_caller_exits = False


def defer_to_caller() -> None:
    global _caller_exits
    _caller_exits = True


def exit_app(code: int | str | None) -> None:
    """The app's end: `exit_now`, or a SystemExit for a caller that exits for it."""
    if _caller_exits:
        raise SystemExit(code)
    exit_now(code)


def exit_now(code: int | str | None) -> None:
    """sys.exit(code), minus the interpreter's finalisation (and so its atexit hooks: children
    the run left running are killed here)."""
    child_processes.kill_all()
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else int(code is not None))
