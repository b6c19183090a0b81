"""Samples wasted (dropped stale / generated) with and without admission control, in one run.

Runs the GRPO app for the same number of steps at max_policy_age 0, 1 and 4,
with admission control on and off, and prints the waste, throughput and
trainer idle time of each.

    .venv/bin/python -m benchmarks.pipeline.admission_waste [--steps 30] [--json PATH] [-- extra overrides]
"""

import argparse
import tempfile
from pathlib import Path

from forge_async.cli.subprocess_run import run_app
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command

COLUMNS = ("max_age", "admission", "generated", "dropped", "wasted", "samples/s", "trainer idle", "gen paused")
WIDTHS = (7, 9, 9, 8, 7, 9, 12, 10)


def wasted(summary: dict) -> float:
    return summary["dropped_stale"] / summary["generated"]


def cells(age: int, admission: str, s: dict) -> list[str]:
    """One run's row, as printed."""
    return [
        str(age),
        admission,
        str(s["generated"]),
        str(s["dropped_stale"]),
        f"{wasted(s):.1%}",
        f"{s['samples_per_s']:.0f}",
        f"{s['trainer_idle_frac']:.0%}",
        f"{s['gen_paused_for_admission_s']:.1f}s",
    ]


def aligned(row: list[str]) -> str:
    return " ".join(cell.rjust(width) for cell, width in zip(row, WIDTHS))


def result_of(summaries: dict[tuple[int, str], dict]) -> BenchmarkResult:
    """`summaries`: (max_policy_age, admission "true"/"false") -> the run's summary.json."""
    result = BenchmarkResult("admission_waste", "Samples wasted, with and without admission control", this_command())
    ages = sorted({age for age, _ in summaries})
    for age in ages:
        on, off = summaries[(age, "true")], summaries[(age, "false")]
        result.figure(f"stale waste without admission, max_policy_age {age}", 100 * wasted(off), "%")
        result.figure(
            f"samples/s with / without admission, max_policy_age {age}", on["samples_per_s"] / off["samples_per_s"], "x"
        )
    rows = [cells(age, admission, s) for (age, admission), s in summaries.items()]
    result.tables.append(Table("One run per max_policy_age and admission control", list(COLUMNS), rows))
    names = [f"max_policy_age {age}" for age in ages]
    for title, y_label, value in (
        ("Samples trained/s", "samples/s", lambda s: s["samples_per_s"]),
        ("Samples wasted (dropped stale / generated)", "% of generated", lambda s: 100 * wasted(s)),
    ):
        lines = [
            Line(f"admission {label}", names, [value(summaries[(age, admission)]) for age in ages])
            for admission, label in (("true", "on"), ("false", "off"))
        ]
        result.series.append(Series(title, "", y_label, lines, bars=True))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ages", type=int, nargs="+", default=[0, 1, 4])
    parser.add_argument("overrides", nargs="*")
    add_json_argument(parser)
    args = parser.parse_args()
    print(aligned(list(COLUMNS)))
    summaries = {}
    with tempfile.TemporaryDirectory() as tmp:
        for age in args.ages:
            for admission in ("true", "false"):
                run = run_app(
                    Path(tmp) / f"{age}-{admission}",
                    f"steps={args.steps}",
                    f"max_policy_age={age}",
                    f"admission_control={admission}",
                    *args.overrides,
                    timeout=1800,
                )
                if run.returncode != 0:
                    raise SystemExit(run.output[-3000:])
                summaries[(age, admission)] = run.summary
                print(aligned(cells(age, admission, run.summary)), flush=True)
    if args.json:
        result_of(summaries).write(args.json)


if __name__ == "__main__":
    main()
