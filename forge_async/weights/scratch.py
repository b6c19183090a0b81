"""The run's scratch directory on each host, who owns it, and its removal however a run ends.

`weights.channel_dir` (a fresh `forge_async-<id>` under /dev/shm by default) holds, on
every host of a run, what the run keeps in memory there: the shared-memory weight
channel's slot files, the generators' LoRA adapter files and their engines' temporary
files (`tmp/`: vLLM's rendezvous file). It is removed when the run ends.

Where nobody could remove it (the controller SIGKILLed, a host's launcher killed),
`owner.json` says whose it was: the host name, and the pid and start time of the
process whose life bounds the run on that host (the controller on its own host; the
launcher, `python -m forge_async.cluster`, on each other host; procs learn it from
FORGE_ASYNC_SCRATCH_OWNER, which both set before spawning). The start time tells a
reused pid from the owner. Every run start and end, and every launcher start, removes
the directories under its root whose owner on this host is dead; one whose owner lives,
or whose owner is on another host or unknown, is never touched.
"""

import json
import os
import shutil
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

OWNER_ENV = "FORGE_ASYNC_SCRATCH_OWNER"
OWNER_FILE = "owner.json"
PREFIX = "forge_async-"


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    started: int  # the process's start time, in clock ticks after boot (/proc/PID/stat)

    @classmethod
    def of(cls, pid: int) -> "Owner | None":
        started = _start_time(pid)
        return None if started is None else cls(socket.gethostname(), pid, started)

    def dead(self) -> bool:
        """Whether this owner is on this host and no longer running (never True for another host's)."""
        return self.host == socket.gethostname() and _start_time(self.pid) != self.started


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, counted after the command name


def host_owner() -> Owner | None:
    """The owner of this host's part of the run, as the launcher or the controller named it."""
    pid = os.environ.get(OWNER_ENV)
    return None if pid is None else Owner.of(int(pid))


def name_this_process_owner() -> None:
    """Make this process the owner of the scratch directories that it and its children claim."""
    os.environ[OWNER_ENV] = str(os.getpid())


def claim(directory: str | Path) -> Path:
    """Create `directory` if needed and record its owner (if known, and none alive is recorded:
    a directory of your own that a dead run left takes the new run's owner)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    owner, recorded = host_owner(), owner_of(directory)
    if owner is not None and (recorded is None or recorded.dead()):
        tmp = directory / f".{OWNER_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(asdict(owner)))
        tmp.replace(directory / OWNER_FILE)
    return directory


def temporary_files(directory: str | Path) -> Path:
    """The claimed scratch directory's `tmp/`, for a process's temporary files."""
    tmp = claim(directory) / "tmp"
    tmp.mkdir(exist_ok=True)
    return tmp


def owner_of(directory: Path) -> Owner | None:
    try:
        return Owner(**json.loads((directory / OWNER_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def remove(directory: str | Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def reclaim(root: Path, owned_by: Owner | None = None) -> list[Path]:
    """Remove the scratch directories under `root` whose owner on this host is dead (or, with
    `owned_by`, is that owner: a launcher tidying up after its host's part of a run)."""
    removed = []
    for directory in sorted(root.glob(f"{PREFIX}*")):
        owner = owner_of(directory)
        if owner is not None and (owner == owned_by or owner.dead()):
            remove(directory)
            removed.append(directory)
    return removed
