"""`ldp mechanisms distribution`: the JSON contract on a file of values, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer

from tests.mechanisms.cli_support import invoke


@pytest.fixture()
def values(tmp_path: Path) -> Path:
    path = tmp_path / "values.txt"
    rng = np.random.default_rng(1)
    path.write_text("\n".join(f"{v:.3f}" for v in 100 + 50 * rng.beta(2, 5, 20_000)) + "\n\n")
    return path


def test_json_contract(app: typer.Typer, values: Path) -> None:
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(values), "--range", "100", "150",
                       "--epsilon", "2", "--bins", "32", "--quantiles", "0.5,0.9", "--ranges", "100:110",
                       "--seed", "3", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert {"grid", "density", "cdf", "cdf_stderr", "quantiles", "report_mean", "ranges"} <= set(result)
    assert result["reports"] == 20_000 and result["mechanism"] == "sw" and result["range"] == [100.0, 150.0]
    grid = np.array(result["grid"])
    assert grid.shape == (33,) and grid[0] == 100 and grid[-1] == 150
    assert len(result["cdf"]) == len(result["cdf_stderr"]) == 33 and len(result["density"]) == 32
    truth = 100 + 50 * np.random.default_rng(1).beta(2, 5, 20_000)
    median = result["quantiles"]["0.5"]
    assert set(result["quantiles"]) == {"0.5", "0.9"} and abs(median["estimate"] - np.median(truth)) < 1.5
    assert abs(result["report_mean"]["estimate"] - truth.mean()) <= 4 * result["report_mean"]["stderr"]
    (fraction,) = result["ranges"]
    assert fraction["low"] == 100 and abs(fraction["estimate"] - np.mean(truth <= 110)) < 0.05
    again = json.loads(invoke(app, "mechanisms", "distribution", "--values", str(values), "--range", "100", "150",
                              "--epsilon", "2", "--bins", "32", "--quantiles", "0.5,0.9", "--ranges", "100:110",
                              "--seed", "3", "--json")[1])
    assert again == result  # seeded


def test_hierarchical_histogram(app: typer.Typer, values: Path) -> None:
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(values), "--range", "100", "150",
                       "--epsilon", "2", "--mechanism", "hh", "--bins", "27", "--fanout", "3", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["method"] == "hh" and len(result["grid"]) == 28 and result["details"]["levels"] == 3


def test_table(app: typer.Typer, values: Path) -> None:
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(values), "--range", "100", "150",
                       "--epsilon", "1", "--smoothing", "1")
    assert code == 0 and "quantile 0.5" in out and "mean (reports)" in out


@pytest.mark.parametrize(("content", "args", "message"), [
    ("1\n2\ndark\n", (), "line 3: 'dark' is not a number"),
    ("", (), "holds no values"),
    ("1\n200\n", (), "value number 2, 200, is outside --range [0, 100]"),
    ("1\n2\n", ("--bins", "2"), "bins must be an integer in [4, 1024]"),
    ("1\n2\n", ("--mechanism", "oue"), "unknown distribution mechanism 'oue'"),
    ("1\n2\n", ("--quantiles", "0.5,1.5"), "quantile levels must lie strictly between 0 and 1"),
    ("1\n2\n", ("--quantiles", "half"), "--quantiles must be comma-separated numbers"),
    ("1\n2\n", ("--ranges", "5-6"), "'5-6' is not LOW:HIGH"),
    ("1\n2\n", ("--ranges", "6:5"), "a range needs low <= high"),
    ("1\n2\n", ("--epsilon", "0"), "epsilon must be finite and > 0"),
    ("1\n2\n", ("--fanout", "3"), "'sw' has no parameter 'fanout'"),
    ("1\n2\n", ("--mechanism", "hh", "--bins", "32"), "bins must be a power of the fanout 4"),
])
def test_bad_input_is_one_line_with_exit_2(app: typer.Typer, tmp_path: Path, content: str, args: tuple[str, ...],
                                           message: str) -> None:
    path = tmp_path / "values.txt"
    path.write_text(content)
    base = {"--epsilon": "1"}
    options = [*args] + [x for k, v in base.items() if k not in args for x in (k, v)]
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(path), "--range", "0", "100", *options)
    assert code == 2, out
    assert message in out and out.count("\n") == 1


@pytest.mark.parametrize("name", ["sw", "hh"])
def test_the_auditor_finds_no_violation(app: typer.Typer, name: str) -> None:
    """`ldp audit` on the distribution mechanisms (sw: thresholds on t*; hh: log-likelihood-ratio events, inputs 0
    and 1): the lower bound stays below eps and comes close to it."""
    code, out = invoke(app, "audit", "--mechanism", name, "--epsilon", "2", "--n", "300000", "--json")
    result = json.loads(out)
    assert code == 0 and result["within_epsilon"] and 1.6 < result["epsilon_lower_bound"] <= 2.0
    code, out = invoke(app, "audit", "--mechanism", name, "--epsilon", "2", "--dims", "3")
    assert code == 2 and "do not apply" in out


def test_an_unreadable_file_and_a_bad_range(app: typer.Typer, tmp_path: Path) -> None:
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(tmp_path / "none.txt"), "--range", "0", "1",
                       "--epsilon", "1")
    assert code == 2 and "cannot read" in out and "No such file" in out
    (tmp_path / "v.txt").write_text("1\n")
    code, out = invoke(app, "mechanisms", "distribution", "--values", str(tmp_path / "v.txt"), "--range", "5", "1",
                       "--epsilon", "1")
    assert code == 2 and "finite lo < hi" in out
