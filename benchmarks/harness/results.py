"""The one result shape every benchmark writes with `--json PATH`.

    {"benchmark": "sync_vs_async",                 # the script's name (benchmarks/KIND/NAME.py)
     "title": "Sync vs async GRPO",
     "command": ".venv/bin/python -m benchmarks.pipeline.sync_vs_async --steps 400",
     "box": {"cores": "2 usable of 2", "commit": "1640291", "torch": "2.13.0+cpu", ...},
     "figures": [{"name": "async speedup", "value": 1.93, "unit": "x"}],     # headline figures
     "tables": [{"title": "...", "columns": ["", "sync", "async"], "rows": [["wall time (s)", 21.4, 11.1]]}],
     "series": [{"title": "steps/s over the run", "x_label": "step", "y_label": "steps/s",
                 "lines": [{"label": "async", "x": [...], "y": [...]}],
                 "log_x": false, "log_y": false, "bars": false}]}

Figures are what the report compares across repeats (their spread); tables and series are
drawn from one run. The box (benchmarks/harness/box.py) is recorded when the file is written.
`read_result` checks the shape and names what is wrong. A result kept as the source of the
figures docs/benchmarks.md states lives in benchmarks/results/NAME.json
(benchmarks/harness/docs.py renders them).
"""

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.harness.box import box
from benchmarks.harness.markdown import format_value

BENCHMARKS = Path(__file__).resolve().parents[1]


@dataclass
class Figure:
    name: str
    value: float
    unit: str


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list]


@dataclass
class Line:
    label: str
    x: list  # numbers; category names in a bar chart
    y: list[float]


@dataclass
class Series:
    title: str
    x_label: str
    y_label: str
    lines: list[Line]
    log_x: bool = False
    log_y: bool = False
    bars: bool = False  # a bar chart: x names the bars, one group per x, one bar per line


@dataclass
class BenchmarkResult:
    benchmark: str
    title: str
    command: str
    box: dict[str, str] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)

    def figure(self, name: str, value: float, unit: str) -> None:
        self.figures.append(Figure(name, float(value), unit))

    def print_summary(self) -> None:
        """Its tables and figures on stdout, as a benchmark ends."""
        for table in self.tables:
            print(f"\n{table.title}")
            for row in [table.columns, *table.rows]:
                print(" | ".join(map(str, row)))
        for figure in self.figures:
            print(f"{figure.name}: {format_value(figure.value, figure.unit)}")

    def write(self, path: str | Path) -> None:
        """The result as JSON, with the box it was measured on (unless already recorded)."""
        self.box = self.box or box()
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results in the report's shape (benchmarks/harness/results.py)"
    )


def module_of(name: str) -> str:
    """The module of the benchmark `name`, e.g. "benchmarks.pipeline.sync_vs_async"."""
    (script,) = [path for path in BENCHMARKS.glob(f"*/{name}.py") if path.parent.name != "harness"]
    return f"benchmarks.{script.parent.name}.{name}"


def this_command() -> str:
    """The command line that ran this benchmark, as a user would type it."""
    module = ".".join(Path(sys.argv[0]).resolve().relative_to(BENCHMARKS.parent).with_suffix("").parts)
    args = [a for a in sys.argv[1:]]
    if "--json" in args:  # where the results went is not part of what was measured
        i = args.index("--json")
        del args[i : i + 2]
    return shlex.join([".venv/bin/python", "-m", module, *args])


def read_result(path: str | Path) -> BenchmarkResult:
    """A result file, its shape checked: a ValueError names the file and what is wrong."""
    try:
        raw = json.loads(Path(path).read_text())
        result = BenchmarkResult(**{k: v for k, v in raw.items() if k not in ("figures", "tables", "series")})
        result.figures = [Figure(**f) for f in raw.get("figures", [])]
        result.tables = [Table(**t) for t in raw.get("tables", [])]
        result.series = [Series(**{**s, "lines": [Line(**line) for line in s["lines"]]}) for s in raw.get("series", [])]
    except (OSError, json.JSONDecodeError, TypeError, KeyError) as err:
        raise ValueError(f"{path}: not a benchmark result ({err})") from err
    for table in result.tables:
        if any(len(row) != len(table.columns) for row in table.rows):
            raise ValueError(
                f"{path}: table {table.title!r} has rows of another width than its {len(table.columns)} columns"
            )
    for series in result.series:
        if any(len(line.x) != len(line.y) for line in series.lines):
            raise ValueError(f"{path}: series {series.title!r} has a line whose x and y differ in length")
    return result
