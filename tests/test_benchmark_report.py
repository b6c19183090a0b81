"""The benchmark report: every benchmark of its sets writes the shared result shape, and the
Markdown page and its plots render from those files (the smallest configurations: the shape is
tested here, the figures are the benchmarks' own business)."""

import ast
import json
from pathlib import Path

import pytest

from benchmarks.harness import report
from benchmarks.harness.results import BENCHMARKS, BenchmarkResult, Table, read_result

pytestmark = pytest.mark.unit


@pytest.mark.e2e
def test_the_smoke_set_runs_each_benchmark_and_renders_the_report(tmp_path):
    assert report.SMOKE.keys() == report.QUICK.keys() <= report.FULL.keys()
    assert report.main(["--smoke", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.md").read_text()
    for name in report.SMOKE:
        result = read_result(tmp_path / "results" / f"{name}.0.json")
        assert result.benchmark == name and result.figures, name
        assert f"(`{report.path_of(name)}`)" in page and result.command in page
        assert f".venv/bin/python -m {report.module_of(name)} " in result.command and "--json" not in result.command
        assert result.box["commit"] and result.box["cores"], name
        for i in range(len(result.series)):
            png = tmp_path / "figures" / f"{name}_{i}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
            assert f"]({'figures/' + png.name})" in page
    facts = json.loads((tmp_path / "report.json").read_text())["box"]
    assert {"cores", "cpu", "memory", "gpu", "commit", "torch", "torchtitan"} <= facts.keys()


def result_with(*values: float) -> list[report.Run]:
    runs = []
    for i, value in enumerate(values):
        result = BenchmarkResult("x", "X", "cmd")
        result.figure("speed", value, "steps/s")
        runs.append(report.Run("x", i, 1.0, result))
    return runs


def test_a_figure_whose_spread_exceeds_a_tenth_of_its_mean_says_so():
    assert report.figure_rows(result_with(10.0, 10.5, 10.2)) == [
        ["speed", "10.2 steps/s", "10 steps/s to 10.5 steps/s over 3 runs"]
    ]
    wide = report.figure_rows(result_with(10.0, 12.0))[0][2]
    assert wide.endswith("spread over 10% of the mean")
    assert report.figure_rows(result_with(7.0))[0][1:] == ["7 steps/s", "one run"]
    assert report.figure_rows(result_with(1234.5, 1300.0))[0][1] == "1,267 steps/s"


def test_a_change_spreads_against_its_ratio():
    """A "fraction" is a change (ratio - 1): -1% to +2% is a 3% spread of the ratio, not 600% of +0.5%."""
    assert report.relative_spread([-0.01, 0.02], "fraction") == pytest.approx(0.03 / 1.005)
    assert report.relative_spread([10.0, 12.0], "x") == pytest.approx(2 / 11)


def test_a_malformed_result_names_its_file_and_what_is_wrong(tmp_path):
    bad = BenchmarkResult("x", "X", "cmd", tables=[Table("t", ["a", "b"], [[1, 2, 3]])])
    path = tmp_path / "x.json"
    bad.write(path)
    with pytest.raises(ValueError, match=f"{path}: table 't' has rows of another width"):
        read_result(path)
    path.write_text('{"title": "no benchmark name"}')
    with pytest.raises(ValueError, match=f"{path}: not a benchmark result"):
        read_result(path)


KINDS = {"harness", "components", "pipeline", "learning", "cluster", "model"}
NOT_BENCHMARKS = {"__init__", "trl_grpo"}  # trl_grpo: the TRL side that benchmarks.pipeline.vs_trl runs


def benchmark_scripts() -> dict[str, Path]:
    return {
        path.stem: path
        for path in BENCHMARKS.glob("*/*.py")
        if path.parent.name != "harness" and path.stem not in NOT_BENCHMARKS
    }


def test_benchmarks_sit_in_their_kind_and_import_each_other_only_through_the_harness():
    assert {path.name for path in BENCHMARKS.iterdir() if path.is_dir() and path.name != "__pycache__"} <= KINDS | {
        "results"
    }
    assert [path.name for path in BENCHMARKS.glob("*.py")] == ["__init__.py"]
    for path in BENCHMARKS.glob("*/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
                assert node.module.startswith("benchmarks.harness"), f"{path}: imports {node.module}"


def test_the_full_set_runs_every_benchmark_and_each_writes_the_result_shape():
    """Every benchmark is in --full, and each takes --json and builds a BenchmarkResult
    (read from the source: running them all is the report's job, hours long)."""
    scripts = benchmark_scripts()
    assert {report.script_of(name) for name in report.FULL} == scripts.keys()
    for name, path in scripts.items():
        calls = {
            node.func.id
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert {"add_json_argument", "BenchmarkResult"} <= calls, name
