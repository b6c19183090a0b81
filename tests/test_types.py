"""forge_async/ and apps/ type-check, as pyproject.toml's [tool.mypy] says (`make lint` runs the same).

The first run in a fresh clone reads torch's and vLLM's types (about 80 s on a 2-core box);
later runs reuse .mypy_cache/ and take seconds.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_the_package_type_checks():
    checked = mypy()
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_checker_can_fail(tmp_path):
    """A Literal choice missed, a Literal compared with a string outside its choices, and an
    Optional used unnarrowed, checked with the project's settings."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from typing import Literal\n"
        "def pick(mode: Literal['sync', 'async']) -> None: ...\n"
        "pick('later')\n"
        "def grow(size: int | None) -> int:\n"
        "    return size + 1\n"
        "def late(mode: Literal['sync', 'async']) -> bool:\n"
        "    return mode == 'asnyc'\n"
    )
    checked = mypy("--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), str(bad))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    for code in ("[arg-type]", "[operator]", "[comparison-overlap]"):
        assert code in checked.stdout, checked.stdout
