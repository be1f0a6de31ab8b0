"""`ldp workload optimize|compare`: the JSON contract, the strategy file, and clear errors."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from ldpstream.cli.workload import register
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism

CONTRACT_KEYS = {"sample_complexity", "worst_case_variance", "average_case_variance"}


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    app.command("noop")(lambda: None)  # a second command keeps `workload` a sub-command group
    register(app)
    return app


def run(app: typer.Typer, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["workload", *args])
    return result.exit_code, result.output


def test_compare_prints_the_json_contract(app: typer.Typer) -> None:
    code, output = run(app, "compare", "--workload", "prefix", "--domain", "32", "--epsilon", "1", "--json")
    assert code == 0, output
    payload = json.loads(output)
    assert set(payload) == {"workload", "domain", "epsilon", "lower_bound", "mechanisms"}
    assert (payload["workload"], payload["domain"], payload["epsilon"]) == ("prefix", 32, 1.0)
    assert set(payload["lower_bound"]) == {"sample_complexity"}
    mechanisms = payload["mechanisms"]
    assert set(mechanisms) == {"optimized", "randomized_response", "hadamard", "hierarchical", "fourier"}
    for row in mechanisms.values():
        assert set(row) == CONTRACT_KEYS
        assert 0 < row["average_case_variance"] <= row["worst_case_variance"] * (1 + 1e-12)
        assert row["sample_complexity"] >= payload["lower_bound"]["sample_complexity"]
    best_baseline = min(row["sample_complexity"] for name, row in mechanisms.items() if name != "optimized")
    assert mechanisms["optimized"]["sample_complexity"] < best_baseline


def test_compare_leaves_out_mechanisms_that_do_not_apply(app: typer.Typer) -> None:
    code, output = run(app, "compare", "-w", "histogram", "-n", "12", "-e", "2", "--json")
    assert code == 0, output
    assert "fourier" not in json.loads(output)["mechanisms"]  # n = 12 is not 2^k


def test_optimize_writes_a_hashed_strategy(app: typer.Typer, tmp_path) -> None:
    out = tmp_path / "strategy.npz"
    code, output = run(app, "optimize", "-w", "3way_marginals", "-n", "16", "-e", "1", "--seed", "3", "-o", str(out))
    assert code == 0, output
    code, output = run(
        app, "optimize", "-w", "3way_marginals", "-n", "16", "-e", "1", "--seed", "3", "-o", str(out), "--json"
    )
    payload = json.loads(output)
    mechanism = FactorizationMechanism.load(out, expected_hash=payload["hash"])
    assert mechanism.epsilon == 1.0 and mechanism.w.shape == (4 * 8, 16)
    assert payload["outputs"] == mechanism.outputs and CONTRACT_KEYS <= set(payload)


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "-w", "nope", "-n", "8", "-e", "1"],
        ["compare", "-w", "parity", "-n", "12", "-e", "1"],
        ["compare", "-w", "prefix", "-n", "8", "-e", "-1"],
        ["optimize", "-w", "prefix", "-n", "1", "-e", "1", "-o", "/tmp/never.npz"],
    ],
)
def test_bad_input_exits_with_a_message(app: typer.Typer, args: list[str]) -> None:
    code, output = run(app, *args)
    assert code == 2 and "error:" in output
