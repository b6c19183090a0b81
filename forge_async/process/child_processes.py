"""Processes the run starts outside Monarch, ended with the controller however it ends.

A child in a session of its own (an OpenEnv server the run serves: uvicorn and its
workers, started with start_new_session) gets no Ctrl-C from the terminal and outlives a
controller that ends with os._exit (a second Ctrl-C), which runs no `finally` block. Each
such child is registered here while it runs; `kill_all` SIGKILLs every one still
registered. The immediate exit (controller/interrupt.py), the app's exit (process/exit.py) and the
interpreter's (atexit) call it last.

Two kinds of children need nothing of this: Monarch's procs end by themselves within
seconds of their controller (tests/test_stopping.py), and the math-verify worker
(tasks/math_answer.py) ends when its pipe from the controller closes.

`kill_all` only sends signals to the pids of a snapshot of a dict: safe to call from a
signal handler.

A controller killed outright (SIGKILL, the OOM killer) runs none of that: a child started
with `dying_with_this_process(command)` is told by the kernel (Linux's PR_SET_PDEATHSIG) with a
SIGTERM when the thread that started it ends, so it must be started from the main thread.
"""

import atexit
import os
import signal
import sys

# Run by the child's Python before its program: ask the kernel for SIGTERM when the parent dies
# (prctl option 1, PR_SET_PDEATHSIG; kept across exec), end at once if it already has, then exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)

_children: dict[int, bool] = {}  # pid -> whether its whole process group is the run's


def register(pid: int, whole_group: bool = True) -> None:
    """`pid` (with `whole_group`: the process group it leads) is killed when the run ends."""
    _children[pid] = whole_group


def unregister(pid: int) -> None:
    """`pid` was stopped by its owner: nothing to kill at the end."""
    _children.pop(pid, None)


@atexit.register
def kill_all() -> None:
    """SIGKILL every registered child (its process group, where registered so)."""
    for pid, whole_group in list(_children.items()):
        try:
            if whole_group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def dying_with_this_process(command: list[str]) -> list[str]:
    """`command` (its first item a path to an executable), run so that it gets SIGTERM when this
    process dies, however it dies (Linux; elsewhere `command` as it is)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]
