"""The figures of the docs (docs/benchmarks.md and any page that quotes a benchmark) rendered
from stored result files, never typed.

    .venv/bin/python -m benchmarks.harness.docs            # rewrite every generated block of docs/
    .venv/bin/python -m benchmarks.harness.docs --check    # exit 1 where a block differs from its file

A generated block sits between two marker comments, the first naming its result file:

    <!-- generated from benchmarks/results/cost_model.json by python -m benchmarks.harness.docs -->
    ...
    <!-- end of generated -->

and holds what that file states: the command, the commit and box it ran on, its headline
figures and its tables. A result is stored by the benchmark's own `--json
benchmarks/results/NAME.json` (the shape of benchmarks/harness/results.py);
tests/test_benchmark_docs.py checks that every block matches its file.
"""

import argparse
import re
import sys
from pathlib import Path

from benchmarks.harness.markdown import format_value, markdown_table
from benchmarks.harness.results import BenchmarkResult, read_result

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
DOC = DOCS / "benchmarks.md"
BLOCK = re.compile(
    r"(?P<start><!-- generated from (?P<file>\S+) by python -m benchmarks\.harness\.docs -->\n)"
    r"(?P<body>.*?)(?P<end><!-- end of generated -->)",
    re.DOTALL,
)
BOX_KEYS = ("cpu", "cores", "memory", "gpu")


def render_result(result: BenchmarkResult) -> str:
    """A result as Markdown: where it comes from, its figures, its tables."""
    box = result.box
    where = ", ".join(f"{key} {box[key]}" for key in BOX_KEYS if key in box)
    origin = (
        f"Commit {box['commit']}; {where}."
        if box
        else "Commit and box not recorded (a result written before they were)."
    )
    parts = [f"```bash\n{result.command}\n```", origin]
    if result.figures:
        rows = [[figure.name, format_value(figure.value, figure.unit)] for figure in result.figures]
        parts.append(markdown_table(["figure", "value"], rows))
    for table in result.tables:
        parts.append(f"**{table.title}**\n\n" + markdown_table(table.columns, table.rows))
    return "\n\n".join(parts) + "\n"


def render(doc: str, repo: Path = REPO) -> str:
    """`doc` with every generated block rendered again from its result file."""

    def block(match: re.Match) -> str:
        result = read_result(repo / match["file"])
        return match["start"] + render_result(result) + "\n" + match["end"]  # a blank line ends the table

    return BLOCK.sub(block, doc)


def stale_blocks(doc: str, repo: Path = REPO) -> list[str]:
    """The result files whose block in `doc` differs from what they render."""
    fresh = {m["file"]: m["body"] for m in BLOCK.finditer(render(doc, repo))}
    return [m["file"] for m in BLOCK.finditer(doc) if m["body"] != fresh[m["file"]]]


def pages_with_blocks(docs: Path = DOCS) -> list[Path]:
    """The Markdown pages under `docs` that hold a generated block."""
    return [page for page in sorted(docs.rglob("*.md")) if BLOCK.search(page.read_text())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is stale")
    parser.add_argument("--doc", type=Path, help="one page (default: every page of docs/ with a block)")
    args = parser.parse_args(argv)
    stale_pages = 0
    for page in [args.doc] if args.doc else pages_with_blocks():
        doc = page.read_text()
        if args.check:
            stale = stale_blocks(doc)
            for file in stale:
                print(f"{page}: the block of {file} differs from the file: python -m benchmarks.harness.docs")
            stale_pages += bool(stale)
        else:
            page.write_text(render(doc))
            print(f"{page}: {len(BLOCK.findall(doc))} generated blocks rendered")
    return 1 if stale_pages else 0


if __name__ == "__main__":
    sys.exit(main())
