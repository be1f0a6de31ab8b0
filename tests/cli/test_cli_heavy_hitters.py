"""`ldp heavy-hitters run`: one device per line of a file, perturbed and decoded in process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from ldpstream.cli import heavy_hitters
from ldpstream.simulator.strings import zipf_words

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    heavy_hitters.register(app)
    return app


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    pop = zipf_words(2000, 1.1, 200_000, np.random.default_rng(4), alphabet="abcdefgh", max_length=6)
    path = tmp_path_factory.mktemp("hh") / "items.txt"
    path.write_bytes(b"\n".join(pop.items().tolist()) + b"\n")
    return path, pop.top(5)


@pytest.mark.parametrize("mechanism", ["auto", "pem", "hcms_tree", "sfp"])
def test_run_prints_the_top_list_as_json(app: typer.Typer, items: tuple[Path, list[str]], mechanism: str) -> None:
    path, top = items
    result = runner.invoke(app, ["heavy-hitters", "run", "--items", str(path), "--epsilon", "4", "--top", "5",
                                 "--mechanism", mechanism, "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["mechanism"] == ("pem" if mechanism == "auto" else mechanism)
    assert out["devices"] == 200_000 and out["seconds"] > 0
    rows = out["top"]
    assert [r["item"] for r in rows][:3] == top[:3]  # the three most frequent, in order (well apart at this n)
    assert all(r["stderr"] > 0 for r in rows)
    assert [r["estimate"] for r in rows] == sorted((r["estimate"] for r in rows), reverse=True)


def test_bad_input_is_refused_with_a_reason(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "items.txt"
    path.write_text("abc\nabcdefgh\n")
    args = ["heavy-hitters", "run", "--items", str(path), "--epsilon", "2"]
    for extra, reason in ((["--max-length", "4"], "longer than the maximum 4"),
                          (["--alphabet", "abc"], "outside the alphabet"),
                          (["--mechanism", "grr"], "unknown heavy-hitter mechanism")):
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 2 and reason in result.output, result.output
    path.write_text("abc\n\nabd\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "line 2 is empty" in result.output
