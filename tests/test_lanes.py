"""The test lanes (tests/README.md): every test module names its lane, and test modules share
helpers through tests/support, never by importing each other or conftest."""

import ast
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).parent
LANES = {"unit", "procs", "e2e"}


def module_paths() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def marks_named(node: ast.AST) -> set[str]:
    """The X of every `pytest.mark.X` under `node`."""
    return {
        n.attr for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
    }  # fmt: skip


def module_lanes(path: Path) -> set[str]:
    """The lanes the module's `pytestmark` names."""
    tree = ast.parse(path.read_text())
    assigned = [
        n.value for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
    ]  # fmt: skip
    return set().union(*(marks_named(value) for value in assigned)) & LANES


def test_every_test_module_names_one_lane():
    wrong = {path.name: sorted(module_lanes(path)) for path in module_paths() if len(module_lanes(path)) != 1}
    assert not wrong, f"each test module needs `pytestmark = pytest.mark.<{'|'.join(sorted(LANES))}>`: {wrong}"


def test_the_lanes_are_registered_markers():
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in config["markers"]}
    assert LANES <= registered
    assert "--strict-markers" in config["addopts"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
    }


def test_no_test_module_imports_another_or_conftest():
    wrong = {
        path.name: sorted(m for m in imported_modules(path) if m == "conftest" or m.split(".")[-1].startswith("test_"))
        for path in [*module_paths(), TESTS / "conftest.py"]
    }
    wrong = {name: modules for name, modules in wrong.items() if modules}
    assert not wrong, f"shared helpers belong in tests/support: {wrong}"
