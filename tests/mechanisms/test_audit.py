"""The epsilon auditor: Clopper-Pearson bounds, shipped mechanisms stay <= eps, broken ones are caught."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import (
    audit,
    audit_mechanism,
    audit_plan,
    clopper_pearson,
    epsilon_lower_bound,
    outcome_events,
    threshold_events,
)
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.multidim import make_vector_mechanism, vector_names
from ldpstream.mechanisms.numeric import Piecewise
from tests.mechanisms.flawed_duchi import Published000Duchi, Published001Duchi

# The audit plan: every registered mechanism (the vector ones at d = 2, and a few larger d).
NUMERIC_NAMES = tuple(registry.NUMERIC)
VECTOR_CASES = tuple((name, 2) for name in vector_names()) + (("duchi", 4), ("hm", 3))
FREQUENCY_NAMES = tuple(registry.FREQUENCY)


@pytest.mark.parametrize(("count", "n"), [(0, 100), (3, 100), (50, 100), (100, 100), (12345, 500_000)])
def test_clopper_pearson_is_the_exact_interval(count: int, n: int) -> None:
    level = 0.9995
    lower, upper = clopper_pearson(count, n, level)
    ci = stats.binomtest(count, n).proportion_ci(confidence_level=2 * level - 1, method="exact")
    assert lower == pytest.approx(ci.low, abs=1e-12) and upper == pytest.approx(ci.high, abs=1e-12)
    assert lower <= count / n <= upper


def test_epsilon_lower_bound_behaviour() -> None:
    n = 1_000_000
    p_b = 0.05
    bound = epsilon_lower_bound(round(n * p_b * math.e), round(n * p_b), n, n, 0.999)
    assert 0.95 < bound < 1.0  # close to the true ln ratio 1, and below it
    assert epsilon_lower_bound(0, 10, n, n, 0.999) == 0.0
    assert epsilon_lower_bound(10, 10, n, n, 0.999) == 0.0
    assert epsilon_lower_bound(1000, 0, n, n, 0.999) > 0  # an event never seen under b


@pytest.mark.parametrize("eps", [0.5, 4.0])
@pytest.mark.parametrize("name", NUMERIC_NAMES)
def test_shipped_numeric_mechanisms_stay_within_epsilon(name: str, eps: float) -> None:
    result = audit_mechanism(registry.make(name, eps), seed=1, n=300_000, n_select=50_000)
    assert result.epsilon_lower_bound <= eps
    assert result.epsilon_lower_bound >= 0.8 * eps  # and the audit has power: the bound is close to eps


@pytest.mark.parametrize(("name", "dims"), VECTOR_CASES)
def test_shipped_vector_mechanisms_stay_within_epsilon(name: str, dims: int) -> None:
    result = audit_mechanism(make_vector_mechanism(name, 1.0, dims), seed=2, n=300_000, n_select=50_000)
    assert 0.7 <= result.epsilon_lower_bound <= 1.0


@pytest.mark.parametrize("cls", [Published000Duchi, Published001Duchi])
def test_published_duchi_is_caught_at_d2(cls: type) -> None:
    result = audit_mechanism(cls(1.0, 2), seed=3)
    assert result.epsilon_lower_bound > 1.0
    # 000 as printed leaks ln(e + 1) ~ 1.31, 001's reading ln(3e) ~ 2.10 (001 Sec. 3.1): the bound stays below.
    true_loss = math.log(math.e + 1) if cls is Published000Duchi else math.log(3 * math.e)
    assert result.epsilon_lower_bound <= true_loss


def test_published_duchi_odd_d_is_not_flagged() -> None:
    assert audit_mechanism(Published000Duchi(1.0, 3), seed=4, n=300_000, n_select=50_000).epsilon_lower_bound <= 1.0


def test_an_outcome_event_is_the_same_set_of_rows_in_any_batch() -> None:
    """Each row of a batch is in exactly one outcome event, the one of its value, whatever the batch size and the
    row's position (a row on its own included): the events are fixed sets, as the bound requires."""
    rng = np.random.default_rng(9)
    outcomes = rng.standard_normal((6, 5))  # full mantissas: a matrix product would round them by position

    def batch(n: int) -> dict[str, np.ndarray]:
        return {"x": outcomes[rng.integers(0, len(outcomes), n)]}

    events = outcome_events("x", lambda r: r["x"])(batch(500), batch(500))
    assert len(events) == len(outcomes)
    for n in (1, 7, 4099):
        reports = batch(n)
        hits = np.array([event.occurs(reports) for event in events])  # (event, row)
        assert (hits.sum(axis=0) == 1).all()
        for event, rows in zip(events, hits, strict=True):
            assert len({tuple(row) for row in reports["x"][rows]}) <= 1
            alone = [bool(event.occurs({"x": reports["x"][i : i + 1]})[0]) for i in range(min(n, 200))]
            assert alone == rows[:200].tolist()


class LeakyPiecewise(Piecewise):
    """Claims eps but samples at 1.5 eps: the auditor must notice."""

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return Piecewise(1.5 * self.epsilon)._sample(t, rng)


def test_a_leaky_numeric_mechanism_is_caught() -> None:
    assert audit_mechanism(LeakyPiecewise(1.0), seed=5).epsilon_lower_bound > 1.0


def test_audit_core_takes_any_inputs_and_events() -> None:
    mech = Piecewise(2.0)
    result = audit(
        mech,
        [(0.5, -0.5)],
        threshold_events("t*", lambda r: r["value"]),
        np.random.default_rng(6),
        n=200_000,
        n_select=20_000,
    )
    assert 1.0 < result.epsilon_lower_bound <= 2.0  # PM's centres for +-0.5 are disjoint: the full eps shows
    with pytest.raises(LDPError):
        audit(mech, [], threshold_events("t*", lambda r: r["value"]), np.random.default_rng(0))
    assert result.to_dict()["inputs"] == [0.5, -0.5] or result.to_dict()["inputs"] == [-0.5, 0.5]


@pytest.mark.parametrize("name", FREQUENCY_NAMES)
def test_frequency_oracles_plug_in(name: str) -> None:
    mech = registry.make(name, 2.0, domain=8)
    pairs, _ = audit_plan(mech)
    assert pairs == [(0, 1)]
    result = audit_mechanism(mech, seed=7, n=300_000, n_select=50_000)
    assert 0.8 * 2.0 <= result.epsilon_lower_bound <= 2.0
