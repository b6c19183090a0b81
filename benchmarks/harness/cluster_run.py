"""A GRPO run across simulated hosts (network namespaces on this box; root only), and its pace."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

from forge_async.cluster.netns import launch_command, simulated_hosts
from forge_async.observability.metrics import read_rows


def steps_per_s(run_dir: Path, first: int, last: int) -> tuple[float, float]:
    """Steps/s between steps `first` and `last` (metrics.jsonl's wall clock), and the mean reward."""
    rows = {r["step"]: r for r in read_rows(run_dir)[0]}
    rate = (last - first) / (rows[last]["time/wall_s"] - rows[first]["time/wall_s"])
    return rate, statistics.fmean(r["reward/mean"] for r in rows.values())


def across_hosts(run_dir: Path, hosts: int, overrides: list[str], while_running=None) -> dict:
    """The run across `hosts` simulated hosts (`while_running(cluster)`, if given, is called once
    every node is started); returns its relays' report (summary.json)."""
    app = [
        "apps.grpo",
        f"hydra.run.dir={run_dir}",
        *overrides,
        f"placement.generator_hosts=[{','.join(map(str, range(1, hosts)))}]",
    ]
    logs = [open(run_dir.parent / f"{run_dir.name}.node{i}.log", "w") for i in range(hosts)]
    with simulated_hosts(hosts) as cluster:
        procs = [
            cluster.start(i, launch_command(hosts, i, *app), stdout=logs[i], stderr=subprocess.STDOUT)
            for i in reversed(range(hosts))
        ]
        if while_running is not None:
            while_running(cluster)
        codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        sys.exit(f"the {hosts}-host run failed ({codes}); see {logs[0].name}")
    return {"relays": json.loads((run_dir / "summary.json").read_text())["weight_receivers"]}
