"""One command for the benchmark report: run a set of benchmarks, write one Markdown page.

    .venv/bin/python -m benchmarks.harness.report              # the quick set, a few minutes
    .venv/bin/python -m benchmarks.harness.report --repeats 3  # ... three times: each figure's spread
    .venv/bin/python -m benchmarks.harness.report --full --out /tmp/report

Each benchmark runs as its own command (`python -m benchmarks.KIND.NAME ... --json FILE`) and
writes its results in the shape of benchmarks/harness/results.py; this script reads those files,
never printed text. DIR (default `benchmark-report/`) receives `report.md` (the box, the commit,
and per benchmark its command, headline figures with their spread over the repeats, tables and
plots), `report.json` (the same, for machines), `figures/*.png`, `results/*.json` and each run's
output in `logs/`. A figure whose spread over the repeats exceeds 10% of its mean says so. The
figures docs/benchmarks.md states come from single results kept in benchmarks/results/
(benchmarks/harness/docs.py).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as PlotFigure

from benchmarks.harness.box import box
from benchmarks.harness.markdown import format_value, markdown_table
from benchmarks.harness.results import BenchmarkResult, Series, module_of, read_result

REPO = Path(__file__).resolve().parents[2]
# name -> arguments; each set names the same benchmarks at different sizes
QUICK = {
    "sync_vs_async": [],
    "pipeline": [],
    "weight_transfer": ["--sizes", "10", "100", "--repeats", "3"],
    "routing_replay": [],
}
# every benchmark, each at the size its docs section quotes: hours on the 2-core box; the
# cross-host ones need root and iproute2 (network namespaces, tc), vs_trl and long_tail the `bench` extra
FULL = QUICK | {
    "weight_transfer": ["--sizes", "10", "100", "500"],
    "pipeline": ["--steps", "400"],
    "vs_trl": ["--runs", "3"],
    "vs_trl_128_tokens": ["--completion-tokens", "128", "--steps", "30", "--runs", "2"],
    "long_tail": [],
    "swap_pause": [],
    "swap_modes": [],
    "startup": [],
    "admission_waste": [],
    "checkpoint_cost": [],
    "trainer_memory": [],
    "gpu_trainer": [],  # the tiny scale where no GPU is seen
    "kept_set_loss": [],
    "learning_reliability": ["--seeds", "5"],
    "distillation": ["--seeds", "3"],
    "self_distillation": [],
    "self_play": [],
    "keep_mask": [],
    "snapshot_refresh": [],
    "rival": [],
    "sft_then_grpo": [],
    "agent_turn_cost": [],
    "agent_overhead": [],
    "openenv_throughput": ["--workers", "1", "2", "4", "--seconds", "15", "--sessions", "64", "--rounds", "3"],
    "cross_host_transfer": ["--torchstore"],
    "cross_host_pipeline": [],
    "routing": [],
    "cost_model": ["--check", "benchmarks/model/cross_host_runs.json"],
    "soak": [],
    "reply_ports": [],
    "stop_deadline": [],
}
# a set entry runs the script of its name, or, for a variant listed here, the script it names
VARIANTS = {"vs_trl_128_tokens": "vs_trl"}
# the smallest configuration of each (tests/test_benchmark_report.py): the shape, not the figures
SMOKE = {
    "sync_vs_async": ["--steps", "25"],
    "pipeline": ["--steps", "25"],
    "weight_transfer": ["--sizes", "4", "--repeats", "1"],
    "routing_replay": [
        "--seeds",
        "1",
        "--layers",
        "2",
        "--prompts",
        "2",
        "--samples",
        "2",
        "--max-tokens",
        "4",
        "--rounds",
        "1",
    ],
}
SETS = {"quick": QUICK, "full": FULL, "smoke": SMOKE}
SPREAD_LIMIT = 0.10


@dataclass
class Run:
    name: str
    repeat: int
    seconds: float
    result: BenchmarkResult | None
    error: str | None = None


def run_benchmark(name: str, args: list[str], repeat: int, out: Path) -> Run:
    """One benchmark command, its output kept in logs/, its results read from results/."""
    result_file = out / "results" / f"{name}.{repeat}.json"
    log = out / "logs" / f"{name}.{repeat}.log"
    command = [sys.executable, "-m", module_of(script_of(name)), *args, "--json", str(result_file)]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    result_file.unlink(missing_ok=True)  # a failed run must not be read as an earlier one's results
    start = time.perf_counter()
    with log.open("w") as output:
        code = subprocess.run(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        return Run(name, repeat, seconds, None, f"exit status {code}, output in {log}")
    try:
        return Run(name, repeat, seconds, read_result(result_file))
    except ValueError as err:
        return Run(name, repeat, seconds, None, str(err))


def script_of(name: str) -> str:
    """The benchmark a set entry runs (a variant runs its script with other arguments)."""
    return VARIANTS.get(name, name)


def path_of(name: str) -> str:
    """A set entry's script, as a path from the repository root."""
    return module_of(script_of(name)).replace(".", "/") + ".py"


def relative_spread(values: list[float], unit: str) -> float | None:
    """(max - min) over the mean; a "fraction" (a change, ratio - 1) over its ratio. None: mean 0."""
    scale = statistics.fmean(values) + (1 if unit == "fraction" else 0)
    return (max(values) - min(values)) / abs(scale) if scale else None


def figure_rows(runs: list[Run]) -> list[list[str]]:
    """Each headline figure: its mean over the runs, its spread, and a flag above SPREAD_LIMIT."""
    values: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for figure in run.result.figures:
            values.setdefault((figure.name, figure.unit), []).append(figure.value)
    rows = []
    for (name, unit), seen in values.items():
        mean = statistics.fmean(seen)
        if len(seen) == 1:
            rows.append([name, format_value(mean, unit), "one run"])
            continue
        spread = f"{format_value(min(seen), unit)} to {format_value(max(seen), unit)} over {len(seen)} runs"
        wide = (relative_spread(seen, unit) or 0) > SPREAD_LIMIT
        rows.append(
            [name, format_value(mean, unit), spread + (f"; spread over {SPREAD_LIMIT:.0%} of the mean" if wide else "")]
        )
    return rows


def draw_series(series: Series, path: Path) -> None:
    figure = PlotFigure(figsize=(7, 3.6), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    ax.set_xscale("log" if series.log_x else "linear")  # before the ticks: setting a scale resets them
    ax.set_yscale("log" if series.log_y else "linear")
    if series.bars:
        width = 0.8 / max(len(series.lines), 1)
        for i, line in enumerate(series.lines):
            ax.bar([j + i * width for j in range(len(line.x))], line.y, width=width, label=line.label)
        ax.set_xticks(
            [j + width * (len(series.lines) - 1) / 2 for j in range(len(series.lines[0].x))], series.lines[0].x
        )
    else:
        for line in series.lines:
            ax.plot(line.x, line.y, label=line.label, marker="o" if len(line.x) < 12 else None)
    ax.set_title(series.title, fontsize="medium")
    ax.set_xlabel(series.x_label)
    ax.set_ylabel(series.y_label)
    ax.grid(True, alpha=0.3)
    if len(series.lines) > 1:
        ax.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)


def section(name: str, runs: list[Run], out: Path) -> str:
    done = [run for run in runs if run.result is not None]
    failed = [run for run in runs if run.result is None]
    if not done:
        return f"## `{path_of(name)}`\n\nFailed: {failed[0].error}\n"
    last = done[-1].result
    parts = [f"## {last.title} (`{path_of(name)}`)", f"```bash\n{last.command}\n```"]
    parts.append(markdown_table(["figure", "value", "spread"], figure_rows(done)))
    if failed:
        parts.append(f"{len(failed)} of {len(runs)} runs failed: {failed[0].error}")
    for table in last.tables:
        parts.append(f"**{table.title}** (one run)\n\n" + markdown_table(table.columns, table.rows))
    for i, series in enumerate(last.series):
        path = out / "figures" / f"{name}_{i}.png"
        draw_series(series, path)
        parts.append(f"![{series.title}](figures/{path.name})")
    return "\n\n".join(parts) + "\n"


def render(
    chosen: str, runs: dict[str, list[Run]], facts: dict[str, str], wall_s: float, repeats: int, out: Path
) -> str:
    header = [
        "# Benchmark report",
        f"`python -m benchmarks.harness.report{'' if chosen == 'quick' else ' --' + chosen}"
        f"{f' --repeats {repeats}' if repeats > 1 else ''}`: the {chosen} set ({len(runs)} benchmarks), "
        f"{repeats} run{'s' if repeats > 1 else ''} each, {wall_s / 60:.1f} min in all.",
        markdown_table(["box", ""], [[key, value] for key, value in facts.items()]),
    ]
    return "\n\n".join(header) + "\n\n" + "\n".join(section(name, name_runs, out) for name, name_runs in runs.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "benchmark-report")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--full", action="store_true", help="the full set: larger sizes, longer runs")
    which.add_argument(
        "--smoke", action="store_true", help="the smallest configurations: checks the report, not the figures"
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs of each benchmark (spread of each figure)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")
    chosen = "full" if args.full else "smoke" if args.smoke else "quick"
    for sub in ("results", "logs", "figures"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs: dict[str, list[Run]] = {}
    total = len(SETS[chosen]) * args.repeats
    for name, bench_args in SETS[chosen].items():
        for repeat in range(args.repeats):
            print(
                f"[{sum(map(len, runs.values())) + 1}/{total}] {module_of(script_of(name))} {' '.join(bench_args)} ...",
                flush=True,
            )
            run = run_benchmark(name, bench_args, repeat, args.out)
            runs.setdefault(name, []).append(run)
            print(f"    {run.seconds:.0f} s" + (f": FAILED, {run.error}" if run.error else ""), flush=True)
    wall_s = time.perf_counter() - start
    facts = box()
    (args.out / "report.md").write_text(render(chosen, runs, facts, wall_s, args.repeats, args.out))
    summary = {
        "set": chosen,
        "wall_s": wall_s,
        "box": facts,
        "runs": {name: [asdict(run) for run in name_runs] for name, name_runs in runs.items()},
    }
    (args.out / "report.json").write_text(json.dumps(summary, indent=1))
    failed = [run for name_runs in runs.values() for run in name_runs if run.error]
    print(f"report: {args.out / 'report.md'} ({wall_s / 60:.1f} min{f'; {len(failed)} runs failed' if failed else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
