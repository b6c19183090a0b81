"""The tree is formatted and lint-clean, as pyproject.toml's [tool.ruff] says (`make lint` fixes what it can)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_code_is_formatted():
    checked = ruff("format", "--check", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_linter_finds_nothing():
    checked = ruff("check", "--output-format", "concise", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_checks_can_fail(tmp_path):
    """A file the formatter would change and the linter flags, checked with the project's settings."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = {  'a':1 }\n")
    settings = ("--config", str(ROOT / "pyproject.toml"))
    assert ruff("format", "--check", *settings, str(bad)).returncode == 1
    assert "F401" in ruff("check", "--output-format", "concise", *settings, str(bad)).stdout
