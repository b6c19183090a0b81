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
        self.controller = here()
        self.where: dict[str, Where | list[Where]] = {"controller": self.controller}

    def record(self, role: Role, where: Where | list[Where]) -> None:
        """`role` runs at `where` (one entry per proc for a mesh of several)."""
        self.where[str(role)] = where
        replace_text(self.path, json.dumps(self.where, indent=2, default=asdict))

    def one(self, role: Role) -> Where:
        """Where `role`'s one proc runs."""
        where = self.where[str(role)]
        if isinstance(where, list):
            raise TypeError(f"{role} runs on {len(where)} procs, not one: ask for each of them")
        return where

    def each(self, role: Role) -> list[Where]:
        """Where each of `role`'s procs runs, by rank (one entry for a role of one proc)."""
        where = self.where[str(role)]
        return where if isinstance(where, list) else [where]

    def reachable(self, role: Role) -> bool:
        """Whether every node `role` runs on still answers (a dead node's procs died with it)."""
        where = self.where.get(str(role), [])
        return all(self.hosts.reachable(w.node) for w in (where if isinstance(where, list) else [where]))
