"""Seconds from SIGTERM to exit in a stalled run, against checkpoint.stop_grace_s + 10 s.

Two stalls, each a real app run sent SIGTERM (as Slurm, Kubernetes or `timeout` would):
- a stalled agent: every episode waits forever in the agent (tests/stalled_agent.py, its
  timeouts raised), so no batch ever comes; SIGTERM 3 s after the meshes are up;
- a hung generator: generator 0 is stopped (SIGSTOP: alive, silent) at step 2 and SIGTERM
  follows 1 s later; the checkpoint then waits ANSWER_TIMEOUT_S for its sampler state.

    .venv/bin/python -m benchmarks.pipeline.stop_deadline [--grace 20] [--json PATH]
"""

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from forge_async.cli.subprocess_run import AppRun, run_app_acting_at
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command

STALLED_AGENT = (
    "--config-name=tool_lookup", "env.name=agent:tests.stalled_agent:play", "env.timeout_s=3600",
    "env.agent.episode_timeout_s=3600", "steps=20",
)  # fmt: skip


def stalled_agent(run_dir: Path, grace: float) -> float:
    sent = {}

    def sigterm_soon(proc) -> None:
        def send() -> None:
            sent["at"] = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)

        threading.Timer(3, send).start()

    run = run_app_acting_at(run_dir, {"meshes up": sigterm_soon}, *STALLED_AGENT, f"checkpoint.stop_grace_s={grace}")
    return seconds_to_exit(run, sent["at"])


def hung_generator(run_dir: Path, grace: float) -> float:
    sent = {}

    def hang_then_sigterm(proc) -> None:
        os.kill(AppRun(0, "", run_dir).procs["generator0"]["pid"], signal.SIGSTOP)
        time.sleep(1)
        sent["at"] = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)

    run = run_app_acting_at(run_dir, {2: hang_then_sigterm}, "steps=400", f"checkpoint.stop_grace_s={grace}")
    return seconds_to_exit(run, sent["at"])


def seconds_to_exit(run: AppRun, sent_at: float) -> float:
    if run.returncode != 128 + signal.SIGTERM:
        raise SystemExit(f"the run did not end as a SIGTERM'd run should (status {run.returncode}):\n{run.output}")
    return run.ended_at - sent_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace", type=float, default=20.0, help="checkpoint.stop_grace_s (its default: 20)")
    add_json_argument(parser)
    args = parser.parse_args()
    result = BenchmarkResult("stop_deadline", "Seconds from SIGTERM to exit in a stalled run", this_command())
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, measure in (("stalled agent", stalled_agent), ("hung generator", hung_generator)):
            seconds = measure(Path(workdir) / name.replace(" ", "_"), args.grace)
            print(f"{name}: SIGTERM to exit {seconds:.1f} s (grace {args.grace:g} s, goal <= {args.grace + 10:g} s)")
            result.figure(f"SIGTERM to exit, {name}", seconds, "s")
            rows.append([name, round(seconds, 1), args.grace, args.grace + 10])
    result.tables.append(Table("SIGTERM to exit", ["stall", "seconds", "grace (s)", "goal (s)"], rows))
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
