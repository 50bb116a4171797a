"""The house stays readable: imports only go down, no module imports itself through others, and
``lmsforge/`` holds only the job packages and the small shared modules (CONTRIBUTING.md, "Where
things are"). Imports are read from the source, deferred ones inside functions included, so a
circle hidden in a function body is found too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lmsforge"

# Floors, lowest first. A unit imports only itself or units on a lower floor, so two units on one
# floor (port/ and verify/, say) never import each other. The ground is the small shared modules,
# which may use one another (the circle check still holds for them).
FLOORS: dict[str, int] = {
    "lmsforge": 0, "errors": 0, "cache": 0, "git": 0, "ui": 0, "options": 0, "native_exit": 0,
    "children": 0,
    "bundled": 0,
    "upstream": 1,
    # plan/ (the planner's trace, replay and bounds) stands on the ground alone; verify/'s
    # core-sim level runs its model benchmarks.
    "series": 2, "channel": 2, "plan": 2,
    "port": 3, "verify": 3, "sim": 3,
    "packaging": 4,
    "frameworks": 5,
    "commands": 6,
    "cli": 7,
    "__main__": 8,
}
GROUND = {name for name, floor in FLOORS.items() if floor == 0 and name != "lmsforge"}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path = PACKAGE) -> bool:
    base = root.parent / name.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, root: Path = PACKAGE) -> set[str]:
    """The lmsforge modules PATH imports, at any depth of its code; `from a import b` counts as
    importing module a.b when b is a module, else a."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == root.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != root.name:
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                found.add(target if is_module(target, root) else source)
    found.discard(name)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    return {module_name(p, root): imports_of(p, root) for p in sorted(root.rglob("*.py"))}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def unit_of(module: str) -> str:
    """The top-level unit a module belongs to: its package under lmsforge/, or itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def uphill_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        here = unit_of(module)
        for target in targets:
            there = unit_of(target)
            if there != here and FLOORS[there] >= FLOORS[here] and FLOORS[there] > 0:
                wrong.append(f"{module} -> {target} ({here} is on floor {FLOORS[here]}, "
                             f"{there} on floor {FLOORS[there]})")
    return sorted(wrong)


def test_no_module_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_imports_only_go_down_the_floors():
    assert uphill_imports(import_graph()) == []


def test_top_level_holds_only_packages_and_the_small_shared_modules():
    entries = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()
               if p.name != "__pycache__" and (p.suffix == ".py" or p.is_dir())}
    assert entries <= set(FLOORS) | {"__init__"}, sorted(entries - set(FLOORS))
    for name in entries - {"__init__", "__main__", "cli"} - GROUND:
        assert (PACKAGE / name).is_dir(), f"lmsforge/{name}.py belongs in a package"


@pytest.mark.parametrize("package", sorted(p for p in FLOORS if (PACKAGE / p).is_dir()))
def test_every_package_says_what_it_does_and_what_it_must_not(package):
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert doc, f"lmsforge/{package}/__init__.py has no docstring"
    assert "must not" in doc.lower(), f"lmsforge/{package}: say what it must not do"


def test_the_checks_find_a_planted_circle_and_an_uphill_import(tmp_path):
    """The checks above can fail: a two-module circle through a deferred import, and a ground
    module importing a job package, are both reported."""
    root = tmp_path / "lmsforge"
    (root / "series").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "errors.py").write_text("def f():\n    from lmsforge.series import manifest\n")
    (root / "series" / "__init__.py").write_text("")
    (root / "series" / "manifest.py").write_text("from lmsforge import errors\n")
    graph = import_graph(root)
    assert circles(graph) == [["lmsforge.errors", "lmsforge.series.manifest"]]
    assert uphill_imports(graph) == [
        "lmsforge.errors -> lmsforge.series.manifest (errors is on floor 0, series on floor 2)"]
