"""`ldp mechanisms privacy|variance` and `ldp audit --reports T` on the longitudinal mechanisms (typer's CliRunner)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer

from ldpstream.cli import mechanisms
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import audit_longitudinal
from ldpstream.mechanisms.longitudinal import LGRR, RAPPOR
from tests.mechanisms.cli_support import invoke


def test_privacy_of_lgrr_names_both_stages(app: typer.Typer) -> None:
    code, out = invoke(
        app, "mechanisms", "privacy", "--mechanism", "l-grr", "--domain", "5",
        "--epsilon-lifetime", "2", "--epsilon-first", "0.8", "--json",
    )
    assert code == 0
    payload = json.loads(out)
    assert list(payload) == ["mechanism", "epsilon_lifetime", "epsilon_one_report", "parameters"]
    assert payload["mechanism"] == "l-grr" and payload["epsilon_lifetime"] == 2.0
    assert payload["epsilon_one_report"] == pytest.approx(0.8, abs=1e-12)
    params = payload["parameters"]
    assert {"p1", "q1", "p2", "q2"} <= set(params)
    # the printed stages are the ones whose chain spends exactly the budgets (ratios of the chained GRR)
    p = params["p1"] * params["p2"] + (1 - params["p1"]) * params["q2"]
    q = params["q1"] * params["p2"] + (1 - params["q1"]) * params["q2"]
    assert math.log(params["p1"] / params["q1"]) == pytest.approx(2.0, abs=1e-12)
    assert math.log(p / q) == pytest.approx(0.8, abs=1e-12)


def test_privacy_of_rappor_from_f(app: typer.Typer) -> None:
    args = ("--mechanism", "rappor", "--domain", "16", "--hashes", "2", "--f", "0.5", "--p", "0.5", "--q", "0.75")
    code, out = invoke(app, "mechanisms", "privacy", *args, "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["epsilon_lifetime"] == pytest.approx(4 * math.log(3), rel=1e-12)  # 2h ln((1 - f/2)/(f/2))
    q_star, p_star = 0.5 * 0.5 * 1.25 + 0.5 * 0.75, 0.5 * 0.5 * 1.25 + 0.5 * 0.5
    assert payload["epsilon_one_report"] == pytest.approx(2 * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star))))
    assert payload["parameters"]["f"] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("name", ["1bitmean", "dbitflip"])
def test_privacy_with_output_perturbation(app: typer.Typer, name: str) -> None:
    domain = ("--domain", "8", "--sampled", "2") if name == "dbitflip" else ()
    code, out = invoke(app, "mechanisms", "privacy", "-m", name, *domain, "--epsilon", "2", "--gamma", "0.2", "--json")
    assert code == 0
    payload = json.loads(out)
    bits, e = (2, math.exp(1.0)) if name == "dbitflip" else (1, math.exp(2.0))  # two bits at eps/2, or one at eps
    flipped = bits * math.log((e * 0.8 + 0.2) / (0.8 + 0.2 * e))  # P[1] over gamma + (1 - 2 gamma)[1/(e+1), e/(e+1)]
    assert payload["epsilon_lifetime"] == 2.0 and payload["epsilon_one_report"] == pytest.approx(flipped, rel=1e-12)
    assert payload["parameters"]["gamma"] == 0.2


@pytest.mark.parametrize(
    "args",
    [
        ("-m", "l-grr", "--domain", "4", "--epsilon-lifetime", "1", "--gamma", "0.1"),  # not an L-GRR parameter
        ("-m", "l-grr", "--domain", "4", "--epsilon-lifetime", "1", "--epsilon-first", "1"),  # eps_1 not below
        ("-m", "l-grr", "--epsilon-lifetime", "1"),  # no domain
        ("-m", "l-osue", "--domain", "4", "--f", "0.5"),  # f is RAPPOR's
        ("-m", "grr", "--domain", "4", "--epsilon-lifetime", "1"),  # not longitudinal
        ("-m", "1bitmean", "--gamma", "0.6", "--epsilon", "1"),
    ],
)
def test_privacy_bad_arguments_exit_2(app: typer.Typer, args: tuple[str, ...]) -> None:
    code, out = invoke(app, "mechanisms", "privacy", *args, "--json")
    assert code == 2 and "error" in out.lower()


@pytest.mark.parametrize("name", list(registry.LONGITUDINAL))
def test_variance_covers_the_longitudinal_mechanisms(app: typer.Typer, name: str) -> None:
    domain = ("--domain", "16") if registry.takes_domain(name) else ()
    code, out = invoke(app, "mechanisms", "variance", "-m", name, "-e", "2", *domain, "--json")
    assert code == 0
    mech = registry.make(name, 2.0, 16) if domain else registry.make(name, 2.0)
    assert json.loads(out)["worst_case_variance"] == pytest.approx(mech.worst_case_variance())  # type: ignore[attr-defined]


def test_rappor_worst_case_variance_is_an_absent_value_under_the_worst_point_mass() -> None:
    """max over u != v of n Var[f_hat_u] when every report holds v."""
    oracle = RAPPOR(3.0, 32, hashes=2, bloom_bits=16, cohorts=16)
    per_point_mass = oracle.variance(np.eye(32))  # row v: the variances of every u when all hold v
    absent = per_point_mass[~np.eye(32, dtype=bool)]
    assert oracle.worst_case_variance() == pytest.approx(absent.max(), rel=1e-12)


# --- the longitudinal audit --------------------------------------------------------------------------------------


@pytest.mark.parametrize("reports", [4, 12])
def test_fresh_noise_grows_with_the_reports_and_memoized_noise_does_not(reports: int) -> None:
    """GRR at eps = 0.5 shows well above one report's 0.5 over T reports (true budget T eps); L-GRR with
    eps_1 = 0.5 and eps_inf = 1 never shows more than 1, however many reports."""
    fresh = audit_longitudinal(registry.make("grr", 0.5, 4), reports, seed=71, n=100_000, n_select=20_000)
    memo = audit_longitudinal(LGRR(1.0, 4, epsilon_first=0.5), reports, seed=72, n=100_000, n_select=20_000)
    assert 0.35 * reports * 0.5 <= fresh.epsilon_lower_bound <= reports * 0.5
    assert fresh.epsilon_lower_bound > 1.0  # beyond what the memoized mechanism could ever leak
    assert 0.7 <= memo.epsilon_lower_bound <= 1.0  # and the memo leaks close to all of eps_inf


def test_one_bit_mean_memo_caps_the_audit() -> None:
    """Without output perturbation every report repeats the memoized bit: T reports show no more than one."""
    mech = registry.make("1bitmean", 1.0)
    result = audit_longitudinal(mech, 20, seed=73, n=100_000, n_select=20_000)
    assert 0.8 <= result.epsilon_lower_bound <= 1.0
    duchi = audit_longitudinal(registry.make("duchi", 1.0), 20, seed=74, n=100_000, n_select=20_000)
    assert duchi.epsilon_lower_bound > 2.0


def test_audit_cli_longitudinal_mode(app: typer.Typer) -> None:
    code, out = invoke(app, "audit", "-m", "l-osue", "-e", "2", "-k", "4", "--reports", "10", "--n", "60000", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["reports"] == 10 and payload["claimed_epsilon"] == 2.0  # min(10 eps_1, eps_inf)
    assert payload["within_epsilon"] and payload["epsilon_lower_bound"] <= 2.0
    code, out = invoke(app, "audit", "-m", "grr", "-e", "0.5", "-k", "4", "--reports", "6", "--n", "60000", "--json")
    assert code == 0 and json.loads(out)["claimed_epsilon"] == 3.0


def test_audit_exit_1_when_a_memo_leaks(app: typer.Typer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A two-stage oracle that forgets its memo (fresh secrets per report) leaks beyond eps_inf: exit status 1."""

    class Forgetful(LGRR):
        def perturb(self, values, rng, secrets=None):  # type: ignore[no-untyped-def, override]
            return super().perturb(values, rng)

    monkeypatch.setattr(mechanisms, "build_mechanism", lambda *args: Forgetful(1.0, 4, epsilon_first=0.6))
    code, out = invoke(app, "audit", "-m", "l-grr", "-e", "1", "-k", "4", "--reports", "12", "--json")
    payload = json.loads(out)
    assert code == 1 and payload["within_epsilon"] is False and payload["epsilon_lower_bound"] > 1.0
