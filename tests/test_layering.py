"""The package's shape: no import circles, compute rooms below the controller side, apps above all
(an app imports the package and itself, never another app).

Read from the source (every import, at any depth of a module), so a circle that a
deferred import hides at run time still counts.
"""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
COMPUTE = {"data", "losses", "models", "weights.shared_memory", "weights.store", "weights.config", "weights.publisher"}
CONTROLLER = {"actors", "handles", "cluster", "controller", "cli", "rollout", "evaluation"}


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


def imports() -> dict[str, set[str]]:
    """forge_async module -> the forge_async modules (and any apps) it imports."""
    modules = {module_name(p): p for p in (ROOT / "forge_async").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = imported(path)
        graph[name] = {t for t in targets if t in modules and t != name} | {t for t in targets if t.startswith("apps")}
    return graph


def app_of(module: str) -> str | None:
    """`apps.sft.config` -> `apps.sft`; None for a module outside apps/."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "apps" and len(parts) > 1 else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

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


def room(module: str) -> str:
    """`forge_async.weights.store` -> `weights.store`; `forge_async.controller.grpo_loop` -> `loop`."""
    return module.removeprefix("forge_async.")


def in_rooms(module: str, rooms: set[str]) -> bool:
    name = room(module)
    return any(name == r or name.startswith(r + ".") for r in rooms)


def test_no_import_circles():
    assert cycles(imports()) == []


def test_compute_rooms_never_import_the_controller_side_and_nothing_imports_apps():
    graph = imports()
    upward = sorted((m, t) for m, ts in graph.items() if in_rooms(m, COMPUTE) for t in ts if in_rooms(t, CONTROLLER))
    assert upward == []
    assert sorted((m, t) for m, ts in graph.items() for t in ts if t.startswith("apps")) == []


def test_the_checks_can_fail():
    """A made-up graph with a circle and an upward arrow is caught by both."""
    graph = {
        "forge_async.data.a": {"forge_async.controller.grpo_loop"},
        "forge_async.controller.grpo_loop": {"forge_async.data.a"},
    }
    assert cycles(graph) == [["forge_async.controller.grpo_loop", "forge_async.data.a"]]
    assert in_rooms("forge_async.data.a", COMPUTE) and in_rooms("forge_async.controller.grpo_loop", CONTROLLER)


def test_apps_import_the_package_never_another_app():
    crossings = sorted(
        (module_name(path), target)
        for path in (ROOT / "apps").rglob("*.py")
        for target in imported(path)
        if app_of(target) not in (None, app_of(module_name(path)))
    )
    assert crossings == []


def test_every_module_lives_in_a_room():
    """`forge_async/errors.py` is the one loose module: everything else sits in a package named for what it does."""
    loose = sorted(p.name for p in (ROOT / "forge_async").glob("*.py") if p.name not in {"__init__.py", "errors.py"})
    assert loose == []


def test_actors_never_import_the_controller_side():
    """An actor's module is what its proc imports: the handles, the loops and the cli stay in the controller."""
    graph = imports()
    controller_side = {"handles", "controller", "cli", "rollout", "evaluation"}
    assert (
        sorted((m, t) for m, ts in graph.items() if in_rooms(m, {"actors"}) for t in ts if in_rooms(t, controller_side))
        == []
    )


# The rooms below the controller that still read its composed config (docs/architecture.md says why).
READS_THE_RUN_CONFIG = {"forge_async.mesh.procs", "forge_async.handles.spawner", "forge_async.weights.route"}


def test_nothing_below_the_controller_imports_it_but_the_run_config_readers():
    graph = imports()
    upward = sorted(
        (m, t)
        for m, ts in graph.items()
        if not in_rooms(m, {"controller", "cli"})
        for t in ts
        if in_rooms(t, {"controller", "cli"})
        and not (m in READS_THE_RUN_CONFIG and t == "forge_async.controller.config")
    )
    assert upward == []
