"""The one result shape every benchmark of the report writes with `--json PATH`.

    {"benchmark": "sync_vs_async",                 # the script's module name in benchmarks/
     "title": "Sync vs async GRPO",
     "command": ".venv/bin/python -m benchmarks.sync_vs_async --steps 400",
     "figures": [{"name": "async speedup", "value": 1.93, "unit": "x"}],     # headline figures
     "tables": [{"title": "...", "columns": ["", "sync", "async"], "rows": [["wall time (s)", 21.4, 11.1]]}],
     "series": [{"title": "steps/s over the run", "x_label": "step", "y_label": "steps/s",
                 "lines": [{"label": "async", "x": [...], "y": [...]}],
                 "log_x": false, "log_y": false, "bars": false}]}

Figures are what the report compares across repeats (their spread); tables and series are
drawn from one run. `read_result` checks the shape and names what is wrong.
"""

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path


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
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)

    def figure(self, name: str, value: float, unit: str) -> None:
        self.figures.append(Figure(name, float(value), unit))

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1))


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the results in the report's shape (benchmarks/results.py)")


def this_command() -> str:
    """The command line that ran this benchmark, as a user would type it."""
    module = Path(sys.argv[0]).stem
    args = [a for a in sys.argv[1:]]
    if "--json" in args:  # where the results went is not part of what was measured
        i = args.index("--json")
        del args[i : i + 2]
    return shlex.join([".venv/bin/python", "-m", f"benchmarks.{module}", *args])


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
            raise ValueError(f"{path}: table {table.title!r} has rows of another width than its {len(table.columns)} columns")
    for series in result.series:
        if any(len(line.x) != len(line.y) for line in series.lines):
            raise ValueError(f"{path}: series {series.title!r} has a line whose x and y differ in length")
    return result
