"""How many cores each proc of a running app used between two moments, from Linux's /proc.

The app writes RUN_DIR/procs.json (every role's host and pid) once its meshes are up; the
CPU time of a pid (all its threads, user + system) is in /proc/PID/stat. Procs on other
hosts are not counted, unless they are simulated hosts of this machine (`every_host`:
network namespaces share its pids).
"""

import json
import os
import socket
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of `pid` so far, None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)


def local_pids(procs_file: Path, every_host: bool = False) -> dict[str, int]:
    """role -> pid for the procs of procs.json on this host, or on all (trainer ranks as `trainer rank i`)."""
    here = socket.gethostname()
    pids = {}
    for role, where in json.loads(procs_file.read_text()).items():
        entries = where if isinstance(where, list) else [where]
        for rank, entry in enumerate(entries):
            name = f"{role} rank {rank}" if isinstance(where, list) else role
            if every_host or entry.get("host") == here:
                pids[name] = entry["pid"]
    return pids


class ProcCpu:
    """Marks of every proc's CPU time; `cores()` is the use between the first and the last."""

    def __init__(self, procs_file: Path, every_host: bool = False):
        self.procs_file = procs_file
        self.every_host = every_host
        self.marks: list[tuple[float, dict[str, float]]] = []

    def mark(self) -> None:
        pids = local_pids(self.procs_file, self.every_host)
        seconds = {role: _cpu_seconds(pid) for role, pid in pids.items()}
        self.marks.append((time.perf_counter(), {r: s for r, s in seconds.items() if s is not None}))

    def cores(self) -> dict[str, float]:
        """role -> cores used on average between the first and the last mark."""
        if len(self.marks) < 2:
            return {}
        (start, first), (end, last) = self.marks[0], self.marks[-1]
        return {role: (last[role] - first[role]) / (end - start) for role in last if role in first}
