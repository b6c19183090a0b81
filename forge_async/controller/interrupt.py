"""Ctrl-C and SIGTERM: the first asks the run to stop cleanly, a second exits at once.

A clean stop gives the step in flight at most `checkpoint.stop_grace_s` to finish, then
saves what the last completed step allows: a checkpoint, the final policy and summary.json
(see TrainingLoop.request_stop). A user who cannot wait presses Ctrl-C again: the controller
exits there and then, its children outside Monarch killed on the way (process/child_processes.py).
"""

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from forge_async.process import child_processes

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(request_stop: Callable[[str], None], grace_s: float) -> Iterator[dict]:
    """Within the running event loop: route SIGINT/SIGTERM to `request_stop(signal name)`;
    `grace_s`: what the step in flight is given (said on the console).

    Yields a dict whose "signal" entry holds the first signal received (or None).
    """
    loop = asyncio.get_running_loop()
    received: dict = {"signal": None}

    def on_signal(sig: signal.Signals) -> None:
        if received["signal"] is not None:
            print(f"\n{sig.name} again: exiting now, without saving", file=sys.stderr, flush=True)
            child_processes.kill_all()
            os._exit(128 + sig)
        received["signal"] = sig
        print(
            f"\n{sig.name}: finishing the step in flight (at most {grace_s:g} s: checkpoint.stop_grace_s), then saving "
            "a checkpoint, the final policy and the summary (press Ctrl-C again to exit at once)",
            file=sys.stderr,
            flush=True,
        )
        request_stop(sig.name)

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield received
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig] or signal.SIG_DFL)  # None: a handler set outside Python


def take_sigterm_as_ctrl_c() -> None:
    """Outside the training loop (start-up, the procs' stop), SIGTERM does what Ctrl-C does there:
    what was started is stopped by the `finally` blocks on the way out (asyncio.run cancels its
    task on SIGINT), where by default the process would die on the spot, leaving its children.
    A run started as a script's background job inherits SIGINT ignored, which would make the
    SIGTERM do nothing: SIGINT is taken back (no terminal's Ctrl-C reaches a background job)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
