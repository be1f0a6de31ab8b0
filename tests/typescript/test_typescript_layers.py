"""The TypeScript SDK's layers (the list in sdk/typescript/README.md, section "Layers"): every import of a file of
`src/` points to its own floor or a lower one, and no file imports itself back (no cycles). Every import counts: static
ones, type-only ones and the `import()` calls that load modules on demand (the bundle's lazy chunks). The imports are
read from the sources by the TypeScript compiler's parser (imports.mjs), so a file that fails to compile is still
checked. The Python side's layers are tests/test_layers.py. Needs Node and the SDK's node_modules, no service."""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
from pathlib import Path

import pytest
from ts_support import HERE, SDK, node

SRC = SDK / "src"
README = SDK / "README.md"
FLOOR_LINE = re.compile(r"^(\d+)\. \*\*([a-z ]+)\*\*: (.+)$")


def read_floors(text: str) -> dict[str, int]:
    """The floor of each name of the README's list (`mechanisms/*`: a directory's files); floors numbered 0, 1..."""
    section = text.partition("\n## Layers\n")[2].partition("\n## ")[0]
    floors: dict[str, int] = {}
    lines = [m for m in map(FLOOR_LINE.match, section.splitlines()) if m]
    assert [int(m.group(1)) for m in lines] == list(range(len(lines))) and lines, "the README's Layers list is missing"
    for m in lines:
        for name in re.findall(r"`([a-z0-9_/*]+)`", m.group(3)):
            assert name not in floors, f"{name} is on two floors"
            floors[name] = int(m.group(1))
    return floors


FLOORS = read_floors(README.read_text())
FILES = sorted(path.relative_to(SRC).with_suffix("").as_posix() for path in SRC.rglob("*.ts"))


def floor_of(name: str) -> int | None:
    """A file's floor: by its name, or its directory's `dir/*`."""
    return FLOORS.get(name, FLOORS.get(f"{posixpath.dirname(name)}/*"))


def parse(paths: list[Path]) -> dict[str, list[dict[str, object]]]:
    done = subprocess.run([node(), str(HERE / "imports.mjs"), *map(str, paths)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"imports.mjs failed (`make install-test`?):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


def resolve(name: str, module: str) -> str | None:
    """The file of `src/` a specifier names from file `name` ("../errors.js" from "mechanisms/base" -> "errors"); None
    for a package or a platform module (not ours), or a data file of ours (JSON: it imports nothing)."""
    if not module.startswith("."):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(name), module))
    return None if path.endswith(".json") and (SRC / path).is_file() else path.removesuffix(".js")


def imports_of(found: dict[str, list[dict[str, object]]]) -> dict[str, list[tuple[str, str, int]]]:
    """File -> the files of ours it imports: (target, kind, line)."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for path, items in found.items():
        name = Path(path).relative_to(SRC).with_suffix("").as_posix()
        out[name] = []
        for item in items:
            module = item["module"]
            assert isinstance(module, str), f"{name}.ts:{item['line']}: an import of a computed name cannot be checked"
            target = resolve(name, module)
            if target is not None:
                out[name].append((target, str(item["kind"]), int(str(item["line"]))))
    return out


IMPORTS = imports_of(parse([SRC / f"{name}.ts" for name in FILES]))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one file, or of a file that imports itself (Tarjan), each
    sorted; the components sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(file: str) -> None:
        index[file] = low[file] = len(index)
        stack.append(file)
        on_stack.add(file)
        for nxt in sorted(edges.get(file, ())):
            if nxt not in index:
                visit(nxt)
                low[file] = min(low[file], low[nxt])
            elif nxt in on_stack:
                low[file] = min(low[file], index[nxt])
        if low[file] == index[file]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == file:
                    break
            if len(component) > 1 or file in edges.get(file, ()):
                found.append(sorted(component))

    for file in sorted(edges):
        if file not in index:
            visit(file)
    return sorted(found)


def a_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through a component's first file, shortest first (breadth-first), as a path back to it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        file = queue.pop(0)
        for nxt in sorted(edges.get(file, ()) & members):
            if nxt == start:
                return [*paths[file], start]
            if nxt not in paths:
                paths[nxt] = [*paths[file], nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")


def test_every_file_has_a_floor_and_every_import_a_file() -> None:
    assert len(FILES) > 30 and "mechanisms/longitudinal" in FILES
    assert not [name for name in FILES if floor_of(name) is None], "files on no floor of the README's Layers list"
    assert not [name for name in FLOORS if not name.endswith("/*") and name not in FILES], "floors name missing files"
    missing = [f"{name}.ts:{line} imports {target}" for name, items in IMPORTS.items() for target, _, line in items
               if target not in FILES]
    assert not missing, missing
    dynamic = {(name, target) for name, items in IMPORTS.items() for target, kind, _ in items if kind == "dynamic"}
    assert ("mechanisms/optional", "mechanisms/longitudinal") in dynamic  # the lazy chunks are walked


@pytest.mark.parametrize("name", FILES)
def test_imports_point_down(name: str) -> None:
    own = floor_of(name)
    assert own is not None
    upward = [f"{target} (floor {floor_of(target)}, {kind}, line {line})" for target, kind, line in IMPORTS[name]
              if (floor_of(target) or 0) > own]
    assert not upward, f"{name}.ts (floor {own}) imports {upward}: imports must point to its floor or a lower one"


def test_no_import_cycles() -> None:
    edges = {name: {target for target, _, _ in items} for name, items in IMPORTS.items()}
    found = cycles(edges)
    assert not found, "import cycles (every kind of import counts): " + "; ".join(
        f"{len(c)} files {c}, e.g. {' -> '.join(a_cycle(c, edges))}" for c in found)


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "src" / "mechanisms" / "bad.ts"
    source.parent.mkdir(parents=True)
    source.write_text('/** import { x } from "../comment.js" */\n'
                      'import {\n  a,\n  b,\n} from "../collector.js";\n'
                      'import type { T } from "./base.js";\n'
                      'export { c } from "../device.js";\n'
                      'const re = /"(?:[^"\\\\]|\\\\.)*"/g; // import("../not.js")\n'
                      'const s = "import(\'../nor.js\')";\n'
                      'export async function f(): Promise<import("../spec.js").Spec> {\n'
                      '  return (await import("./longitudinal.js")).g(re, s);\n}\n'
                      'import("@noble/ed25519");\n')
    found = parse([source])[str(source)]
    assert [(i["module"], i["kind"], i["line"]) for i in found] == [
        ("../collector.js", "static", 2), ("./base.js", "type", 6), ("../device.js", "static", 7),
        ("../spec.js", "type", 10), ("./longitudinal.js", "dynamic", 11), ("@noble/ed25519", "dynamic", 13)]
    assert resolve("mechanisms/bad", "../collector.js") == "collector" and resolve("x", "node:fs") is None
    edges = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"e"}}
    assert cycles(edges) == [["a", "b", "c"], ["e"]] and a_cycle(["a", "b", "c"], edges) == ["a", "b", "c", "a"]
    assert read_floors("x\n## Layers\n\n0. **low**: `a`, `d/*`\n1. **high**: `b`\n\n## Next\n2. **no**: `c`\n") == {
        "a": 0, "d/*": 0, "b": 1}
