"""What reaches the console: forge_async's own lines; third-party output goes to RUN_DIR/logs/.

vLLM, Monarch, torch and the libraries under them write warnings and progress bars
from Python, Rust and C++, in the controller and in every proc. Redirecting the
file descriptors 1 and 2 catches all of it, whatever the language; the controller
keeps the console for itself on duplicates of the original descriptors. With
`verbose=true` nothing is redirected.
"""

import io
import logging
import os
import sys
import time
from pathlib import Path

import psutil


def _launch_time() -> float:
    """When this process started, on the wall clock. psutil's `create_time` adds the start tick
    to the boot time, which Linux gives in whole seconds: up to 1 s early. On Linux the start
    tick is set against CLOCK_BOOTTIME instead (10 ms resolution)."""
    try:
        with open("/proc/self/stat") as stat:
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime
    except OSError:  # no procfs (macOS)
        return psutil.Process().create_time()
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + start_ticks / os.sysconf("SC_CLK_TCK")


_LAUNCHED_AT = _launch_time()


def since_launch() -> str:
    """Seconds since this process started, as a start-up line's prefix: `[  6.2s]`."""
    return f"[{time.time() - _LAUNCHED_AT:5.1f}s]"


def _open_log(log_dir: Path, name: str) -> int:
    log_dir.mkdir(parents=True, exist_ok=True)
    return os.open(log_dir / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def send_output_to_log(log_dir: str, name: str) -> None:
    """In a proc (its `bootstrap`): everything it writes to stdout/stderr goes to LOG_DIR/NAME.log.

    On another node the log is written under the same path on that node.
    """
    log = _open_log(Path(log_dir), name)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def keep_console_for_own_lines(log_dir: Path) -> None:
    """In the controller: third-party output to LOG_DIR/controller.log, ours to the console.

    `print` and Python tracebacks use sys.stdout / sys.stderr, rebound here to the
    original console; anything writing to the raw descriptors 1 and 2 (Rust, C++,
    handlers made before this call) lands in the log, and so do Python warnings.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    console_out, console_err = os.dup(1), os.dup(2)
    log = _open_log(log_dir, "controller")
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = io.TextIOWrapper(os.fdopen(console_out, "wb", buffering=0), line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(console_err, "wb", buffering=0), line_buffering=True)
    logging.captureWarnings(True)
    warnings_log = logging.getLogger("py.warnings")
    warnings_log.addHandler(logging.StreamHandler(sys.__stderr__))  # descriptor 2: the log
    warnings_log.propagate = False
