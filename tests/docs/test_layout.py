"""The layer map of the docs (docs/reference/layout.md, rendered by docs/hooks.py from `tests/layers.json`, the table
tests/test_layers.py enforces) shows every package on its floor, and every module it names exists."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ldpstream"
LAYERS = json.loads((ROOT / "tests" / "layers.json").read_text())["layers"]
NAMED = re.compile(r"`([a-z_]+(?:/|\.py|\.json)?)`")  # a module, folder or data file of the package


def rendered() -> str:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.on_page_markdown((ROOT / "docs" / "reference" / "layout.md").read_text())  # type: ignore[no-any-return]


def test_the_page_shows_every_package_on_its_floor() -> None:
    page = rendered()
    packages = {p.stem for p in PACKAGE.iterdir() if (p.is_dir() and (p / "__init__.py").exists())
                or (p.suffix == ".py" and not p.stem.startswith("__"))}
    assert packages == {e["package"] for e in LAYERS}
    for entry in LAYERS:
        assert re.search(rf"^\| {entry['floor']} \| `src/ldpstream/{entry['package']}[/.]", page, re.M), entry
    assert "<!--" not in page


def test_every_module_the_table_names_exists() -> None:
    missing = [f"{e['package']}: {name}" for e in LAYERS for name in NAMED.findall(e["what"])
               if not any((PACKAGE / e["package"] / f"{name.rstrip('/')}{suffix}").exists()
                          for suffix in ("", ".py"))]
    assert not missing, missing
