"""The fenced blocks of README.md and docs/*.md, as tests/test_docs.py walks them, and the check that
a run's console reads as a documented console block does.

A block may carry a marker, the HTML comment on the line above its fence (nothing shows on the
rendered page):

    <!-- not run: needs a GPU -->          what CI lacks to run it (a GPU, hosts, the network, hours,
                                           the output of an earlier run), or why it is nothing to run
    <!-- console: grpo -->                 a run's console: a test that runs the app checks its own
                                           output against every block of that label
                                           (`assert_console_as_documented(output, "grpo")`)
"""

import re
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.docs import BLOCK as GENERATED
from forge_async.cli.subprocess_run import REPO

# docs/report/report.md is not walked: the report writes it whole (benchmarks/harness/report.py).
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<lang>[\w+-]*)[ \t]*$")
MARKER = re.compile(r"^<!-- (?P<kind>not run|console): (?P<what>.+?) -->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, counted from 1
    lang: str  # the fence's info string: bash, python, yaml, json, or "" (text)
    text: str
    marker: tuple[str, str] | None  # (kind, what) of the marker above it
    generated: bool  # inside a block rendered from a result file (benchmarks/harness/docs.py)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in order."""
    text = page.read_text()
    lines = text.splitlines()
    generated = _generated_lines(text)
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        close = f"{opening['indent']}{opening['fence']}"
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip() == close)
        before = [line for line in lines[:i] if line.strip()]
        marker = MARKER.match(before[-1].strip()) if before else None
        body = "\n".join(line.removeprefix(opening["indent"]) for line in lines[i + 1 : end])
        found.append(
            Block(page, i + 1, opening["lang"], body, marker and (marker["kind"], marker["what"]), i in generated)
        )
        i = end + 1
    return found


def every_block() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def _generated_lines(text: str) -> set[int]:
    """The line indices (from 0) inside generated blocks."""
    inside: set[int] = set()
    for match in GENERATED.finditer(text):
        first = text.count("\n", 0, match.start())
        inside.update(range(first, first + match.group(0).count("\n") + 1))
    return inside


# The console check: a documented console block and a run's output compare by the shape of their
# lines: numbers, paths and runs of spaces do not count, the words and the order do. The first
# step's line keeps its number, so that what a block shows before step 1 (the start, the first
# evaluation) must come before it.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
PATH = re.compile(r"\S*[A-Za-z_]\S*/\S*|\S*/\S*[A-Za-z_]\S*")  # a word with a slash (not 1/400)
FIRST_STEP = re.compile(r"step +1/")


def shape(line: str) -> str:
    shaped = " ".join(NUMBER.sub("N", PATH.sub("PATH", line)).split())
    return shaped.replace("step N/", "step 1/", 1) if FIRST_STEP.match(line) else shaped


def console_blocks(label: str) -> list[Block]:
    return [block for block in every_block() if block.marker == ("console", label)]


def assert_console_as_documented(output: str, label: str) -> None:
    """Every block marked `<!-- console: LABEL -->` reads as `output` does: each of its lines is a
    line of `output` (a line ending in `...` is the start of one; a line `...` stands for lines left
    out; lines of one shape in a row, such as step lines, stand for any number of them), in the
    block's order."""
    documented = console_blocks(label)
    assert documented, f"no block is marked <!-- console: {label} -->"
    printed = [shape(line) for line in output.splitlines()]
    for block in documented:
        position = 0
        for line in _distinct_lines(block.text):
            wanted = shape(line.removesuffix("..."))
            starts = line.endswith("...")
            found = next(
                (
                    i
                    for i in range(position, len(printed))
                    if (printed[i].startswith(wanted) if starts else printed[i] == wanted)
                ),
                None,
            )
            assert found is not None, (
                f"{block.where}: the run printed no line like {line!r} after the lines matched before it:\n{output}"
            )
            position = found + 1


def _distinct_lines(text: str) -> list[str]:
    """The block's lines but `...`, lines of one shape in a row kept once."""
    kept: list[str] = []
    for line in text.splitlines():
        if line.strip() in ("", "...") or (kept and shape(kept[-1]) == shape(line)):
            continue
        kept.append(line)
    return kept
