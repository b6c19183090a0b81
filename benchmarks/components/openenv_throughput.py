"""Episodes/s on the repo's OpenEnv server (tool_lookup) against its uvicorn workers.

    .venv/bin/python -m benchmarks.components.openenv_throughput --workers 1 2 4 --sessions 64 --seconds 20

Per worker count, the server is started as a run starts it (env.openenv.app=...); then
`--clients` processes keep `--sessions` episodes going between them for `--seconds`. An
episode is what env.name=openenv plays (envs/openenv/client.py): a WebSocket session,
reset with a tool_lookup prompt, the lookup call, the answer, close. The model's turns
are scripted (no generator): what is measured is the server and the transport. The worker
counts are measured in turn, `--rounds` times (a shared box's load drifts); printed per
measurement: episodes/s and the server's CPU time per episode (1000 / that is what one
GIL-bound worker can serve at most); then the medians and their ratio to the first count.
The clients' own CPU shares the box. With --json, the same in the report's shape
(benchmarks/harness/results.py).
"""

import argparse
import asyncio
import multiprocessing
import random
import statistics
import tempfile
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import psutil

from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command
from forge_async.envs.environment import ModelTurn
from forge_async.envs.config import OpenEnvConfig
from forge_async.envs.openenv.client import OpenEnvSessions
from forge_async.envs.openenv.schema import action_form
from forge_async.envs.openenv.server_process import ServerProcess
from forge_async.models.tokenizer import EOS, VOCAB, build_digit_tokenizer
from forge_async.envs.games.tool_lookup import ToolLookupTask

APP = "forge_async.envs.servers.tool_lookup_openenv:app"
EOS_ID = VOCAB.index(EOS)


async def episodes_until(sessions: OpenEnvSessions, deadline: float, seed: int) -> int:
    """Episodes played one after another until `deadline`: each earns the whole reward."""
    task, rng, played = ToolLookupTask(build_digit_tokenizer(), 8), random.Random(seed), 0
    while time.monotonic() < deadline:
        prompt = task.sample(rng)
        key = prompt.meta["key"]
        value = prompt.meta["table"][key]
        env = sessions()
        try:
            await env.reset(prompt)
            await env.step(ModelTurn(str(key), [key, EOS_ID], "stop", 0))
            step = await env.step(ModelTurn(str(value), [value, EOS_ID], "stop", 1))
        finally:
            await env.close()
        assert step.done and abs(step.reward - 0.7) < 1e-9, step
        played += 1
    return played


def client(url: str, sessions: int, seconds: float, seed: int, start: Barrier, played: Queue) -> None:
    """One client process: once every client is ready (`start`), `sessions` episodes at a time for
    `seconds`; puts the episodes it finished in `played`."""
    config = OpenEnvConfig(url=url, token_ids_field="token_ids")
    factory = OpenEnvSessions(url, config, EOS_ID, 30.0, actions=action_form(url, config, None, 30.0))
    start.wait()

    async def run() -> int:
        deadline = time.monotonic() + seconds
        counts = await asyncio.gather(*(episodes_until(factory, deadline, seed * 1000 + i) for i in range(sessions)))
        return sum(counts)

    played.put(asyncio.run(run()))


def server_cpu_s(server: ServerProcess) -> float:
    """CPU seconds the server's processes (its workers included) have used so far."""
    root = psutil.Process(server.process.pid)
    return sum(p.cpu_times().user + p.cpu_times().system for p in [root, *root.children(recursive=True)])


def measure(workers: int, sessions: int, clients: int, seconds: float) -> tuple[float, float]:
    """Episodes/s with `workers` server workers, and the server's CPU milliseconds per episode."""
    spawn = multiprocessing.get_context("spawn")
    start, played = spawn.Barrier(clients + 1), spawn.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(APP, workers, sessions, Path(tmp) / "server.log")
        server.start()
        try:
            server.wait_until_up(300)
            share = sessions // clients
            procs = [
                spawn.Process(target=client, args=(server.url, share, seconds, i, start, played))
                for i in range(clients)
            ]
            for proc in procs:
                proc.start()
            start.wait()  # the clients have started up: the server is idle until now
            cpu_before = server_cpu_s(server)
            episodes = sum(played.get() for _ in procs)
            cpu = server_cpu_s(server) - cpu_before
            for proc in procs:
                proc.join()
        finally:
            server.stop()
    return episodes / seconds, 1000 * cpu / episodes


def medians(rates: dict[int, list[float]]) -> dict[int, float]:
    """Median episodes/s per worker count."""
    return {workers: statistics.median(measured) for workers, measured in rates.items()}


def result_of(rows: list[tuple[int, int, float, float]], median: dict[int, float]) -> BenchmarkResult:
    """rows: (round, workers, episodes/s, server CPU ms per episode) per measurement; median: per worker count."""
    result = BenchmarkResult("openenv_throughput", "OpenEnv server throughput against its workers", this_command())
    first = next(iter(median))
    for workers, rate in median.items():
        result.figure(f"workers {workers}: median episodes/s", rate, "episodes/s")
        if workers != first:
            result.figure(f"workers {workers} / workers {first}, median episodes/s", rate / median[first], "x")
    result.figure("server CPU per episode (median)", statistics.median(row[3] for row in rows), "ms")
    columns = ["round", "workers", "episodes/s", "server CPU ms/episode"]
    result.tables.append(Table("Each measurement", columns, [list(row) for row in rows]))
    line = Line("median", [str(w) for w in median], list(median.values()))
    result.series.append(
        Series(
            "Episodes/s against uvicorn workers (median over the rounds)", "workers", "episodes/s", [line], bars=True
        )
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sessions", type=int, default=64, help="episodes in flight, all clients together")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3, help="the worker counts measured in turn, this often")
    add_json_argument(parser)
    args = parser.parse_args()
    rates: dict[int, list[float]] = {w: [] for w in args.workers}
    rows = []
    print(f"{'round':>5} {'workers':>7} {'episodes/s':>10} {'server CPU ms/episode':>21}")
    for round_ in range(args.rounds):
        for workers in args.workers:
            rate, cpu_ms = measure(workers, args.sessions, args.clients, args.seconds)
            rates[workers].append(rate)
            rows.append((round_, workers, rate, cpu_ms))
            print(f"{round_:>5} {workers:>7} {rate:>10.0f} {cpu_ms:>21.1f}", flush=True)
    median = medians(rates)
    first = median[args.workers[0]]
    for workers, rate in median.items():
        print(f"workers {workers}: median {rate:.0f} episodes/s ({rate / first:.2f}x the first)")
    if args.json:
        result_of(rows, median).write(args.json)


if __name__ == "__main__":
    main()
