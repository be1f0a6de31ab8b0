"""`ldp mechanisms list|variance|simulate` and `ldp audit`: the JSON contracts, through typer's CliRunner."""

from __future__ import annotations

import json
import math

import pytest
import typer

from ldpstream.cli import mechanisms
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.multidim import make_vector_mechanism
from ldpstream.mechanisms.numeric import Piecewise
from tests.mechanisms.cli_support import invoke
from tests.mechanisms.flawed_duchi import Published000Duchi


def test_list(app: typer.Typer) -> None:
    code, out = invoke(app, "mechanisms", "list", "--epsilon", "2")
    assert code == 0
    for name in registry.known_names():
        assert name in out
    code, out = invoke(app, "mechanisms", "list", "--epsilon", "2", "--json")
    rows = {r["mechanism"]: r for r in json.loads(out)["mechanisms"]}
    assert rows["pm"]["worst_case_variance"] == pytest.approx(Piecewise(2.0).worst_case_variance())
    assert set(rows) == (set(registry.known_names()) | set(registry.KEYVALUE) | set(registry.OPEN_DOMAIN)
                         | set(registry.DISTRIBUTION))
    assert rows["sw"]["kind"] == rows["hh"]["kind"] == "distribution"
    assert rows["sw"]["worst_case_variance"] > rows["pm"]["worst_case_variance"]
    # key-value: a rare key's n Var f_hat among --domain keys; open domain: a rare string's, over all devices
    assert rows["pckv-ue"]["worst_case_variance"] == pytest.approx(
        float(registry.make_keyvalue("pckv-ue", 2.0, 64).frequency_variance(0.0)))
    assert rows["pem"]["worst_case_variance"] > rows["hashed_grr"]["worst_case_variance"] > 0  # levels cost n / T


@pytest.mark.parametrize(
    ("name", "dims"), [("pm", 1), ("hm", 1), ("duchi", 4), ("pm", 5), ("laplace", 3), ("harmony", 10)]
)
def test_variance_contract(app: typer.Typer, name: str, dims: int) -> None:
    code, out = invoke(
        app, "mechanisms", "variance", "--mechanism", name, "--epsilon", "1.5", "--dims", str(dims), "--json"
    )
    assert code == 0
    payload = json.loads(out)
    assert set(payload) == {"mechanism", "epsilon", "dims", "domain", "worst_case_variance"}
    assert (
        payload["mechanism"] == name
        and payload["epsilon"] == 1.5
        and payload["dims"] == dims
        and payload["domain"] is None
    )
    expected = registry.make(name, 1.5) if dims == 1 else make_vector_mechanism(name, 1.5, dims)
    assert payload["worst_case_variance"] == pytest.approx(expected.worst_case_variance())  # type: ignore[attr-defined]


def test_variance_of_a_frequency_oracle(app: typer.Typer) -> None:
    code, out = invoke(app, "mechanisms", "variance", "-m", "oue", "-e", "1", "--domain", "32", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["domain"] == 32
    assert payload["worst_case_variance"] == pytest.approx(4 * math.e / (math.e - 1) ** 2)  # 004 Table 1, OUE


def test_simulate_contract(app: typer.Typer) -> None:
    trials = 50
    code, out = invoke(
        app,
        "mechanisms",
        "simulate",
        "-m",
        "pm",
        "-e",
        "1",
        "--n",
        "20000",
        "--seed",
        "3",
        "--trials",
        str(trials),
        "--json",
    )
    assert code == 0
    payload = json.loads(out)
    assert set(payload) == {
        "mechanism",
        "epsilon",
        "n",
        "dims",
        "domain",
        "seed",
        "trials",
        "empirical_mse",
        "theoretical_mse",
    }
    # The empirical MSE of a normal mean estimate over T trials is theoretical * chi2_T / T: within 4 sd of 1.
    assert abs(payload["empirical_mse"] / payload["theoretical_mse"] - 1) <= 4 * math.sqrt(2 / trials)


def test_simulate_vector(app: typer.Typer) -> None:
    code, out = invoke(
        app, "mechanisms", "simulate", "-m", "hm", "-e", "4", "--n", "5000", "--dims", "3", "--trials", "5", "--json"
    )
    assert code == 0 and json.loads(out)["dims"] == 3


def test_audit_contract(app: typer.Typer) -> None:
    code, out = invoke(app, "audit", "--mechanism", "duchi", "--epsilon", "1", "--dims", "2", "--n", "200000", "--json")
    assert code == 0
    payload = json.loads(out)
    assert {
        "mechanism",
        "epsilon",
        "dims",
        "domain",
        "epsilon_lower_bound",
        "confidence",
        "n",
        "within_epsilon",
    } <= set(payload)
    assert payload["within_epsilon"] and 0.7 < payload["epsilon_lower_bound"] <= 1.0


def test_audit_exit_status_on_a_violation(app: typer.Typer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flawed variant is not reachable by name; injected, it makes `ldp audit` fail."""
    monkeypatch.setattr(mechanisms, "build_mechanism", lambda *args: Published000Duchi(1.0, 2))
    code, out = invoke(app, "audit", "--mechanism", "duchi", "--epsilon", "1", "--dims", "2", "--json")
    assert code == 1
    assert json.loads(out)["within_epsilon"] is False


@pytest.mark.parametrize(
    "args",
    [
        ("mechanisms", "variance", "-m", "nope", "-e", "1", "--json"),
        ("mechanisms", "variance", "-m", "pm", "-e", "0", "--json"),
        ("mechanisms", "variance", "-m", "pm", "-e", "1", "--domain", "4", "--json"),
        ("mechanisms", "variance", "-m", "pm", "-e", "1", "--dims", "0", "--json"),
        ("mechanisms", "simulate", "-m", "pm", "-e", "1", "--n", "0", "--json"),
        ("audit", "-m", "pm", "-e", "-1", "--json"),
    ],
)
def test_bad_arguments_exit_2(app: typer.Typer, args: tuple[str, ...]) -> None:
    code, out = invoke(app, *args)
    assert code == 2 and "error" in out.lower()
