"""The docs' generated blocks (docs/benchmarks.md and other pages) state what their stored result files hold
(benchmarks/harness/docs.py), so a figure there is never typed by hand."""

import re

import pytest

from benchmarks.harness import docs
from benchmarks.harness.results import BenchmarkResult, Table

pytestmark = pytest.mark.unit

COMMAND = re.compile(r"python -m (benchmarks(?:\.[a-z_]+)+)")  # not a placeholder (KIND.NAME)


def test_every_generated_block_of_the_docs_matches_its_result_file():
    pages = docs.pages_with_blocks()
    assert docs.DOC in pages, "no generated block on the benchmarks page"
    for path in pages:
        page = path.read_text()
        assert docs.stale_blocks(page) == [], f"{path}: python -m benchmarks.harness.docs"
        for match in docs.BLOCK.finditer(page):
            assert match["file"].startswith("benchmarks/results/"), match["file"]


def test_a_block_renders_its_command_box_figures_and_tables_and_a_changed_file_makes_it_stale(tmp_path):
    result = BenchmarkResult(
        "x",
        "X",
        ".venv/bin/python -m benchmarks.components.x --n 3",
        box={"commit": "abc1234", "cores": "2 usable of 2", "gpu": "none"},
    )
    result.figure("speed", 12.5, "steps/s")
    result.tables.append(Table("Runs", ["run", "steps/s"], [[1, 12.5]]))
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    result.write(tmp_path / "benchmarks" / "results" / "x.json")
    marker = "<!-- generated from benchmarks/results/x.json by python -m benchmarks.harness.docs -->\n"
    page = f"# X\n\n{marker}typed by hand\n<!-- end of generated -->\n\nprose\n"

    rendered = docs.render(page, tmp_path)
    assert docs.stale_blocks(page, tmp_path) == ["benchmarks/results/x.json"]
    assert docs.stale_blocks(rendered, tmp_path) == []
    assert rendered.startswith(f"# X\n\n{marker}```bash\n.venv/bin/python -m benchmarks.components.x --n 3\n```")
    assert "Commit abc1234; cores 2 usable of 2, gpu none." in rendered
    assert "| speed | 12.5 steps/s |" in rendered and "**Runs**" in rendered and "| 1 | 12.5 |" in rendered
    assert "typed by hand" not in rendered and rendered.endswith("<!-- end of generated -->\n\nprose\n")

    result.figures[0].value = 13.0
    result.write(tmp_path / "benchmarks" / "results" / "x.json")
    assert docs.stale_blocks(rendered, tmp_path) == ["benchmarks/results/x.json"]


def test_every_benchmark_command_in_the_docs_names_a_module_that_exists():
    repo = docs.REPO
    texts = [repo / "README.md", *(repo / "docs").rglob("*.md"), *(repo / "benchmarks").rglob("*.py")]
    commands = {(path.relative_to(repo), m[1]) for path in texts for m in COMMAND.finditer(path.read_text())}
    assert commands
    missing = [
        (str(path), module) for path, module in commands if not (repo / (module.replace(".", "/") + ".py")).exists()
    ]
    assert missing == []
