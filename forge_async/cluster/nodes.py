"""Which node this is, how many there are, and where node 0 listens: torchrun-style.

Flags win over the environment; the environment is read the way torchrun and
Slurm set it, so `srun python -m forge_async.cluster -- apps.grpo ...` needs no flags:

    flag            torchrun env    Slurm env
    --nnodes        NNODES          SLURM_NNODES
    --node-rank     NODE_RANK       SLURM_NODEID
    --master-addr   MASTER_ADDR     first host of SLURM_JOB_NODELIST
    --master-port   MASTER_PORT     (default 29500)
    --join-timeout  FORGE_ASYNC_JOIN_TIMEOUT (seconds node 0 waits for the others; default 120)
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from forge_async.errors import ConfigError

DEFAULT_PORT = 29500
DEFAULT_JOIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class NodeSpec:
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.nnodes < 1:
            raise ConfigError(f"--nnodes={self.nnodes}: must be >= 1")
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(f"--node-rank={self.node_rank}: must be in 0..{self.nnodes - 1}")
        if not 0 < self.master_port < 65536:
            raise ConfigError(f"--master-port={self.master_port}: not a TCP port")

    @classmethod
    def resolve(
        cls,
        nnodes: int | None,
        node_rank: int | None,
        master_addr: str | None,
        master_port: int | None,
        join_timeout_s: float | None,
        environ: Mapping[str, str],
    ) -> "NodeSpec":
        """Flags first, then torchrun's variables, then Slurm's; one node on localhost if none."""
        nodelist = environ.get("SLURM_JOB_NODELIST")
        return cls(
            nnodes=_first_int(nnodes, environ, "NNODES", "SLURM_NNODES", default=1),
            node_rank=_first_int(node_rank, environ, "NODE_RANK", "SLURM_NODEID", default=0),
            master_addr=master_addr
            or environ.get("MASTER_ADDR")
            or (first_host(nodelist) if nodelist else "127.0.0.1"),
            master_port=_first_int(master_port, environ, "MASTER_PORT", default=DEFAULT_PORT),
            join_timeout_s=join_timeout_s or float(environ.get("FORGE_ASYNC_JOIN_TIMEOUT", DEFAULT_JOIN_TIMEOUT_S)),
        )


def _first_int(flag: int | None, environ: Mapping[str, str], *names: str, default: int) -> int:
    if flag is not None:
        return flag
    for name in names:
        if environ.get(name):
            try:
                return int(environ[name])
            except ValueError:
                raise ConfigError(f"{name}={environ[name]!r}: not an integer") from None
    return default


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: "gpu[003-005,9],cpu1" -> "gpu003"."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise ConfigError(f"SLURM_JOB_NODELIST={nodelist!r}: cannot read its first host")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first
