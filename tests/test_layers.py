"""The layers of the code base: every import points down, and no module imports itself back (no cycles).

The floors are in `tests/layers.json` (the one table: docs/hooks.py renders docs/reference/layout.md from it):

    mechanisms <- contract <- {device, runtime, client} <- {simulator, edge, aggregator, shuffler, sgd}
        <- {readapi, services} <- cli

Every layer is a subpackage of the one namespace `ldpstream` (src/ldpstream). A layer may import its own modules and
any layer on a lower floor; layers on the same floor never import each other, so the device SDK never reaches the
server plumbing (`runtime`: Kafka, Redis, metrics). Imports anywhere in a module count (inside functions too). The
walk reads the source with `ast`, so a module that fails to import is still checked.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "ldpstream"
LAYERS = json.loads((ROOT / "tests" / "layers.json").read_text())["layers"]
FLOORS: dict[str, int] = {entry["package"]: entry["floor"] for entry in LAYERS}
TOP_MODULES = {"__init__", "__main__"}  # the namespace's own face: `ldpstream` and `python -m ldpstream`


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of the namespace."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def layer(name: str) -> str:
    """The layer a module of ours belongs to (`ldpstream.edge.app` -> `edge`); `ldpstream` for the top modules."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] not in TOP_MODULES else "ldpstream"


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
        found.update(t for t in targets if t.split(".")[0] == "ldpstream")
    return found


MODULES = dict(modules())
KNOWN = set(MODULES)


def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (names that are attributes, not modules, are dropped)."""
    return {name: {t for t in imported(name, path) if t in KNOWN and t != name} for name, path in MODULES.items()}


def test_every_layer_is_walked() -> None:
    assert {layer(name) for name in MODULES} == set(FLOORS) | {"ldpstream"}
    assert len(MODULES) > 60
    assert sorted(p.name for p in SRC.iterdir() if not p.name.endswith(".egg-info")) == ["ldpstream"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_point_down(name: str) -> None:
    own = layer(name)
    if own == "ldpstream":  # `ldpstream/__init__.py` hands names on lazily; `__main__` is the command line
        return
    upward = sorted(t for t in imported(name, MODULES[name])
                    if layer(t) != own and (layer(t) == "ldpstream" or FLOORS[layer(t)] >= FLOORS[own]))
    assert not upward, f"{name} (floor {FLOORS[own]}) imports {upward}: imports must point to a lower floor"


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
    bad.write_text("from ldpstream.cli import app\n\ndef f():\n    from . import sibling\n    import numpy\n")
    found = imported("ldpstream.contract.bad", bad)
    assert found >= {"ldpstream.cli", "ldpstream.cli.app", "ldpstream.contract.sibling"}
    assert "numpy" not in found and layer("ldpstream.cli.app") == "cli"


SERVER_MODULES = ("faust", "aiokafka", "confluent_kafka", "redis", "aiohttp", "scipy")


@pytest.mark.parametrize("module", ["ldpstream.device", "ldpstream.mechanisms.mixed", "ldpstream.contract.collector"])
def test_the_device_side_loads_no_server_module(module: str) -> None:
    """What a device imports loads none of the server stack (the base install has none of it): module-level imports
    of SciPy and the clients stay on the collector's side (imported where they are used)."""
    code = f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                timeout=120).stdout.split())
    assert not loaded & set(SERVER_MODULES), sorted(loaded & set(SERVER_MODULES))
