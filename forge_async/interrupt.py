"""Ctrl-C and SIGTERM: the first asks the run to stop cleanly, a second exits at once.

A clean stop finishes the step in flight and then saves a checkpoint, the
final policy and summary.json (see GRPOLoop.request_stop). That takes seconds;
a user who cannot wait presses Ctrl-C again.
"""

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(request_stop: Callable[[str], None]) -> Iterator[dict]:
    """Within the running event loop: route SIGINT/SIGTERM to `request_stop(signal name)`.

    Yields a dict whose "signal" entry holds the first signal received (or None).
    """
    loop = asyncio.get_running_loop()
    received: dict = {"signal": None}

    def on_signal(sig: signal.Signals) -> None:
        if received["signal"] is not None:
            print(f"\n{sig.name} again: exiting now, without saving", file=sys.stderr, flush=True)
            os._exit(128 + sig)
        received["signal"] = sig
        print(
            f"\n{sig.name}: finishing the step in flight, then saving a checkpoint, the final "
            "policy and the summary (press Ctrl-C again to exit at once)",
            file=sys.stderr,
            flush=True,
        )
        request_stop(sig.name)

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield received
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
