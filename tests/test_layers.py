"""The layers of the code base: every import points down, and no module imports itself back (no cycles).

    ldp  <-  collection  <-  runtime  <-  {producer, aggregator, sgd_coordinator, edge}  <-  ldpstream

A package may import its own modules and any package on a lower floor; packages on the same floor never import
each other. Imports anywhere in a module count (inside functions too). The walk reads the source with `ast`, so a
module that fails to import is still checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"ldp": 0, "collection": 1, "runtime": 2, "producer": 3, "aggregator": 3, "sgd_coordinator": 3, "edge": 3,
          "ldpstream": 4}


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of our packages."""
    for package in FLOORS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imported(name: str, path: Path) -> set[str]:
    """The modules of ours that a module imports (resolving relative imports)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] in FLOORS)
    return found


MODULES = dict(modules())
KNOWN = set(MODULES)


def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (names that are attributes, not modules, are dropped)."""
    return {name: {t for t in imported(name, path) if t in KNOWN and t != name} for name, path in MODULES.items()}


def test_every_package_is_walked() -> None:
    assert {name.split(".")[0] for name in MODULES} == set(FLOORS)
    assert len(MODULES) > 60


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name: str) -> None:
    top = name.split(".")[0]
    upward = sorted(t for t in imported(name, MODULES[name])
                    if t.split(".")[0] != top and FLOORS[t.split(".")[0]] >= FLOORS[top])
    assert not upward, f"{name} (floor {FLOORS[top]}) imports {upward}: imports must point to a lower floor"


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ldpstream.cli import app\n\ndef f():\n    from . import sibling\n")
    assert imported("collection.bad", bad) >= {"ldpstream.cli", "ldpstream.cli.app", "collection.sibling"}


def test_the_image_and_the_wheel_carry_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    for package in FLOORS:
        assert f"COPY {package} {package}" in dockerfile, package
        assert f'"{package}*"' in pyproject, package
