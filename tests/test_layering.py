"""The package's shape, as data: its rooms floor by floor (`ROOMS`), the imports allowed to run up
a floor (`UPWARD`, each with its reason), no import circle, and the apps on top (an app imports
the package and itself, never another app). docs/architecture.md's account of the house is held
against the same data: its table of rooms, its list of the imports that run up a floor, and its
trip of a single-turn episode.

Read from the source (every import, at any depth of a module, under TYPE_CHECKING too), so a
circle or an upward import that a deferred import hides at run time still counts.
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# The rooms, from the top floor down: the apps, then forge_async's packages and its one loose
# module (errors.py). A room imports only the rooms below it. docs/architecture.md's table names
# them in this order.
ROOMS = [
    "apps",
    "cli",
    "controller",
    "compose",
    "evaluation",
    "rollout",
    "checkpoint",
    "handles",
    "actors",
    "envs",
    "mesh",
    "learning",
    "scoring",
    "tasks",
    "observability",
    "generation",
    "cluster",
    "losses",
    "data",
    "weights",
    "models",
    "config",
    "process",
    "errors",
]

# (importer, imported) -> why it may run up a floor. An entry goes when its import does.
UPWARD: dict[tuple[str, str], str] = {}

# The single-turn episode's trip (docs/architecture.md) names every module that these reach by
# imports without leaving these rooms (config modules aside).
TRIP_FROM = ("forge_async.rollout.worker", "forge_async.rollout.single_turn")
TRIP_ROOMS = {"rollout", "tasks", "scoring", "data", "losses"}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported(path: Path) -> set[str]:
    """Every module `path` names in an import (`from a import b`: `a` and `a.b`)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets.add(node.module)
            targets.update(f"{node.module}.{a.name}" for a in node.names)
    return targets


@cache
def module_paths() -> dict[str, Path]:
    """Every module of forge_async and of the apps, by name."""
    paths = [*(ROOT / "forge_async").rglob("*.py"), *(ROOT / "apps").rglob("*.py")]
    return {module_name(p): p for p in paths}


@cache
def imports() -> dict[str, set[str]]:
    """Module -> the modules of forge_async and of the apps it imports."""
    modules = module_paths()
    return {name: {t for t in imported(path) if t in modules and t != name} for name, path in modules.items()}


def room(module: str) -> str | None:
    """`forge_async.weights.store` -> `weights`; `apps.sft.config` -> `apps`; None for the
    package's face (`forge_async/__init__.py`), which hands names on."""
    parts = module.split(".")
    if parts[0] == "apps":
        return "apps"
    return parts[1] if len(parts) > 1 else None


def floor(module: str) -> int:
    """The floor of `module`'s room, the ground 0."""
    return len(ROOMS) - 1 - ROOMS.index(room(module))


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports from a room to a room above it."""
    return {
        (m, t)
        for m, targets in graph.items()
        if room(m) in ROOMS
        for t in targets
        if room(t) in ROOMS and floor(t) > floor(m)
    }


def doc_path(module: str) -> str:
    """`forge_async.mesh.procs` -> `mesh/procs.py`, as the docs name a module."""
    return str(module_paths()[module].relative_to(ROOT / "forge_async"))


def app_of(module: str) -> str | None:
    """`apps.sft.config` -> `apps.sft`; None for a module outside apps/."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "apps" and len(parts) > 1 else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def reached(graph: dict[str, set[str]], starts: tuple[str, ...], rooms: set[str]) -> set[str]:
    """The modules `starts` reach by imports without leaving `rooms`, `starts` included."""
    seen, todo = set(starts), list(starts)
    while todo:
        for target in graph[todo.pop()]:
            if room(target) in rooms and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def doc_section(start: str, end: str) -> str:
    """docs/architecture.md from the line that begins with `start` up to `end`."""
    text = ARCHITECTURE.read_text()
    begin = re.search(rf"^{re.escape(start)}", text, re.MULTILINE)
    assert begin is not None, f"docs/architecture.md has no line beginning {start!r}"
    return text[begin.start() : text.index(end, begin.start())]


# The code


def test_every_module_lives_in_a_room():
    """`forge_async/errors.py` is the one loose module: everything else sits in a package named for what it does."""
    loose = sorted(p.name for p in (ROOT / "forge_async").glob("*.py") if p.name not in {"__init__.py", "errors.py"})
    assert loose == []


def test_every_room_has_a_floor():
    rooms = {room(m) for m in module_paths()} - {None}
    assert sorted(rooms - set(ROOMS)) == [], "a new room: give it its floor in ROOMS (and the doc's table)"
    assert sorted(set(ROOMS) - rooms) == [], "a room in ROOMS that no module lives in"


def test_a_room_imports_only_the_rooms_below_it():
    wrong = sorted(upward(imports()) - UPWARD.keys())
    assert wrong == [], "imports that run up a floor (move the code, or allow the import in UPWARD with its reason)"


def test_every_allowed_upward_import_is_still_made():
    """An entry goes when its import does."""
    made = upward(imports())
    assert sorted(pair for pair in UPWARD if pair not in made) == []


def test_no_import_circles():
    assert cycles(imports()) == []


def test_apps_import_the_package_never_another_app():
    crossings = sorted(
        (module_name(path), target)
        for path in (ROOT / "apps").rglob("*.py")
        for target in imported(path)
        if app_of(target) not in (None, app_of(module_name(path)))
    )
    assert crossings == []


def test_the_checks_can_fail():
    """A made-up graph with a circle and an upward import is caught by both."""
    graph = {
        "forge_async.data.a": {"forge_async.controller.grpo_loop"},
        "forge_async.controller.grpo_loop": {"forge_async.data.a"},
        "apps.grpo.main": {"forge_async.controller.grpo_loop"},
    }
    assert cycles(graph) == [["forge_async.controller.grpo_loop", "forge_async.data.a"]]
    assert upward(graph) == {("forge_async.data.a", "forge_async.controller.grpo_loop")}


# docs/architecture.md


def test_the_architecture_table_names_the_rooms_floor_by_floor():
    table = doc_section("| room | what it holds |", "\n\n")
    rows = table.splitlines()[2:]  # past the header and its rule
    named = [name for row in rows for name in re.findall(r"`([a-z_]+)(?:/|\.py)`", row.split("|")[1])]
    assert named == ROOMS


def test_the_architecture_lists_the_imports_that_run_up_a_floor():
    """Each with its reason, as UPWARD gives it; `none` when there are none."""
    listed = doc_section("Imports that run up a floor", "\n\n")
    made = sorted(upward(imports()))
    pairs = re.findall(r"`([\w/]+\.py)` -> `([\w/]+\.py)`", listed)
    assert pairs == [(doc_path(m), doc_path(t)) for m, t in made]
    for m, t in made:
        assert f"`{doc_path(m)}` -> `{doc_path(t)}`: {UPWARD[m, t]}" in listed
    assert ("none" in listed) == (not made)


def test_the_episode_trip_names_every_module_its_rollout_reaches():
    """The trip's definition, as the doc says it: it names every module TRIP_FROM reaches within
    TRIP_ROOMS (config modules aside), only files that exist, and counts them right."""
    trip = doc_section("## One single-turn episode", "\n## ")
    named = {p for p in re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", trip) if p.split("/")[0] in ROOMS}
    assert sorted(p for p in named if not (ROOT / "forge_async" / p).is_file()) == []
    modules = module_paths()
    wanted = {
        doc_path(m)
        for m in reached(imports(), TRIP_FROM, TRIP_ROOMS)
        if not m.endswith(".config") and modules[m].name != "__init__.py"
    }
    assert sorted(wanted - named) == []
    count = re.search(r"That is (\d+) files in (\d+) rooms", trip)
    assert count is not None
    assert (int(count[1]), int(count[2])) == (len(named), len({p.split("/")[0] for p in named}))
