"""When this process was created, on the wall clock every process of a host shares.

A process's start-up begins before any of its own code runs (the interpreter, then Monarch's
or Hydra's imports); the start-up spans (observability/span_names.py) start here, so that a
proc's and the controller's phases line up on one timeline from the launch.
"""

import os
import time
from pathlib import Path


def process_started_ns() -> int:
    """Wall-clock ns at which this process was created (Linux: the start time in /proc/self/stat,
    10 ms ticks since boot); now, where /proc is not there to say."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return time.time_ns()
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, counted from the one after the name
    age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time_ns() - int(age_s * 1e9)
