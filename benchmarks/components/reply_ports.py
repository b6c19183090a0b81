"""What a Monarch reply port costs the proc that answers: call_one against one long-lived port.

    .venv/bin/python -m benchmarks.components.reply_ports [--calls 20000] [--rounds 2] [--json PATH]

One actor on a proc of its own answers a trivial endpoint `--calls` times per round, first
through `call_one` (a new reply port per call), then on one `forge_async.mesh.reply_port.ReplyPort`
(`broadcast`, the answer sent to the caller's port). Prints, per way and round, the answering
proc's resident set growth per call (VmRSS after glibc's malloc_trim, before and after the
calls, each after 2,000 calls of warm-up) and the round trip per call.
"""

import argparse
import asyncio
import ctypes
import statistics
import time

import forge_async  # noqa: F401  (process-wide settings first)
from monarch.actor import endpoint

from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command
from forge_async.mesh.proc_actor import ProcActor
from forge_async.mesh.procs import spawn_procs
from forge_async.mesh.reply_port import ReplyPort, answers_on_port

WARMUP_CALLS = 2000
WAYS = ("call_one", "reply port")


class Answerer(ProcActor):
    @endpoint
    @answers_on_port
    async def echo(self, value: int) -> int:
        return value

    @endpoint
    async def rss_kb(self) -> int:
        """VmRSS after giving freed heap back to the system: what the proc keeps."""
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


async def measure(calls: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """way -> per round (bytes kept per call, µs per call)."""
    procs = spawn_procs(None, 1, "answerer", None)
    try:
        answerer = procs.spawn("answerer", Answerer)
        replies = ReplyPort()
        ask = {
            "call_one": lambda i: answerer.echo.call_one(i),
            "reply port": lambda i: replies.call_one(answerer.echo, i, alive=answerer.where),
        }
        found: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
        for _ in range(rounds):
            for way in WAYS:
                for i in range(WARMUP_CALLS):
                    await ask[way](i)
                before = await answerer.rss_kb.call_one()
                start = time.perf_counter()
                for i in range(calls):
                    await ask[way](i)
                seconds = time.perf_counter() - start
                after = await answerer.rss_kb.call_one()
                found[way].append(((after - before) * 1024 / calls, seconds / calls * 1e6))
        return found
    finally:
        await procs.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per way and round")
    parser.add_argument("--rounds", type=int, default=2)
    add_json_argument(parser)
    args = parser.parse_args()
    found = asyncio.run(measure(args.calls, args.rounds))
    print(f"{'way':12}{'round':>7}{'bytes kept/call':>17}{'µs/call':>10}")
    for way in WAYS:
        for i, (kept, us) in enumerate(found[way]):
            print(f"{way:12}{i + 1:>7}{kept:>17.0f}{us:>10.0f}")
    if args.json:
        result_of(found, args.calls).write(args.json)


def result_of(found: dict[str, list[tuple[float, float]]], calls: int) -> BenchmarkResult:
    result = BenchmarkResult("reply_ports", "What a reply port costs the proc that answers", this_command())
    for way in WAYS:
        result.figure(
            f"{way}: bytes kept per call (median over rounds)", statistics.median(k for k, _ in found[way]), "B"
        )
        result.figure(f"{way}: round trip (median over rounds)", statistics.median(u for _, u in found[way]), "µs")
    rows = [[way, i + 1, calls, round(kept), round(us)] for way in WAYS for i, (kept, us) in enumerate(found[way])]
    result.tables.append(Table("Each round", ["way", "round", "calls", "bytes kept/call", "µs/call"], rows))
    return result


if __name__ == "__main__":
    main()
