"""Processes the run starts outside Monarch, ended with the controller however it ends.

A child in a session of its own (an OpenEnv server the run serves: uvicorn and its
workers, started with start_new_session) gets no Ctrl-C from the terminal and outlives a
controller that ends with os._exit (a second Ctrl-C), which runs no `finally` block. Each
such child is registered here while it runs; `kill_all` SIGKILLs every one still
registered. The immediate exit (interrupt.py), the app's exit (exit.py) and the
interpreter's (atexit) call it last.

Two kinds of children need nothing of this: Monarch's procs end by themselves within
seconds of their controller (tests/test_stopping.py), and the math-verify worker
(tasks/math_answer.py) ends when its pipe from the controller closes.

`kill_all` only sends signals to the pids of a snapshot of a dict: safe to call from a
signal handler.
"""

import atexit
import os
import signal

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
