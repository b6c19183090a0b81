"""procs.json: where every role's procs run (node, address, host name, pid).

Rewritten whenever a role is placed or replaced, so that operators (and tests)
can find each proc of a running run.
"""

import json
from dataclasses import asdict
from pathlib import Path

from forge_async.mesh.located import Where, here
from forge_async.cluster.hosts import Hosts
from forge_async.mesh.roles import Role
from forge_async.observability.outputs import replace_text


def located(where: Where) -> str:
    """A proc, as error messages name it."""
    return f"pid {where.pid} on node {where.node}: {where.host}, {where.addr}"


class ProcsFile:
    def __init__(self, run_dir: Path, hosts: Hosts):
        self.path = run_dir / "procs.json"
        self.hosts = hosts
        self.where: dict[str, Where | list[Where]] = {"controller": here()}

    def record(self, role: Role, where: Where | list[Where]) -> None:
        """`role` runs at `where` (one entry per proc for a mesh of several)."""
        self.where[str(role)] = where
        replace_text(self.path, json.dumps(self.where, indent=2, default=asdict))

    def reachable(self, role: Role) -> bool:
        """Whether every node `role` runs on still answers (a dead node's procs died with it)."""
        where = self.where.get(str(role), [])
        return all(self.hosts.reachable(w.node) for w in (where if isinstance(where, list) else [where]))
