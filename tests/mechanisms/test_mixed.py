"""Mixed records (000 Sec. IV-C): unbiased per-attribute estimates with valid standard errors, merge, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.mixed import CategoricalAttribute, MixedCollector, NumericAttribute
from ldpstream.mechanisms.numeric.auto import choose_sampled

NUMERIC = [
    NumericAttribute("age", 18.0, 90.0),
    NumericAttribute("load", -5.0, 5.0, mechanism="pm"),
    NumericAttribute("battery", 0.0, 1.0, mechanism="duchi"),
]


def numeric_records(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "age": np.clip(rng.normal(40, 12, n), 18, 90),
        "load": rng.uniform(-5, 5, n),
        "battery": rng.beta(2, 5, n),
    }


def truth(records: dict[str, np.ndarray]) -> dict[str, float]:
    return {name: float(col.mean()) for name, col in records.items()}


@pytest.mark.parametrize(("eps", "k"), [(1.0, None), (2.0, 2), (8.0, None), (3.0, 3)])
def test_numeric_estimates_unbiased(eps: float, k: int | None) -> None:
    collector = MixedCollector(NUMERIC, eps, k=k)
    rng = np.random.default_rng(31)
    records = numeric_records(rng, 200_000)
    est = collector.estimate(collector.accumulate(collector.perturb(records, rng)))
    for name, value in truth(records).items():
        assert est[name].n == 200_000 and np.shape(est[name].value) == ()
        assert abs(float(est[name].value) - value) <= 4 * float(est[name].stderr), name


def test_k_follows_equation_12_and_budget_split() -> None:
    assert MixedCollector(NUMERIC, 2.0).k == 1  # Harmony's one attribute per device
    assert MixedCollector(NUMERIC, 5.0).k == 2
    split = MixedCollector.budget_split(NUMERIC, 1.5)
    assert split.k == 3 and split.scale == 1.0
    assert all(m.epsilon == pytest.approx(0.5) for m in split.mechanisms.values())
    batch = split.perturb(numeric_records(np.random.default_rng(0), 50), np.random.default_rng(1))
    assert all(len(rows) == 50 for rows in batch.rows.values())


def test_auto_picks_the_lowest_sampled_worst_case() -> None:
    collector = MixedCollector(NUMERIC, 1.0)
    assert collector.mechanisms["age"].name == choose_sampled(1.0, 3, 1)
    assert collector.mechanisms["load"].name == "pm"


def test_stderr_matches_replicated_variance() -> None:
    """Over R replicate collections from one fixed population, Var[estimate] = mean stderr^2 within the
    chi-square interval of a variance from R draws: ratio within 1 +- 4 sqrt(2 / (R - 1))."""
    collector = MixedCollector(NUMERIC, 2.0)
    rng = np.random.default_rng(32)
    records = numeric_records(rng, 2000)
    replicates = 400
    values = {name: [] for name in records}
    variances = {name: [] for name in records}
    for _ in range(replicates):
        est = collector.estimate(collector.accumulate(collector.perturb(records, rng)))
        for name in records:
            values[name].append(float(est[name].value))
            variances[name].append(float(est[name].stderr) ** 2)
    tol = 4 * math.sqrt(2 / (replicates - 1))
    for name in records:
        ratio = np.var(values[name], ddof=1) / np.mean(variances[name])
        assert abs(ratio - 1) <= tol, (name, ratio)


def test_batch_layout_and_merge() -> None:
    collector = MixedCollector(NUMERIC, 2.0)
    rng = np.random.default_rng(33)
    records = numeric_records(rng, 10_000)
    batch = collector.perturb(records, rng)
    assert batch.n == 10_000
    all_rows = np.concatenate(list(batch.rows.values()))
    assert np.array_equal(np.sort(all_rows), np.arange(10_000))  # k = 1: every device reports exactly one
    for name, schema in collector.schemas.items():
        assert len(batch.rows[name]) == len(batch.reports[name]["value"])
        assert (schema.violations(batch.reports[name]) == "").all()
    other = collector.perturb(records, rng)
    both = collector.accumulate(batch) + collector.accumulate(other)
    union = {name: np.concatenate([batch.reports[name]["value"], other.reports[name]["value"]]) for name in records}
    for name, mech in collector.mechanisms.items():
        block = both[collector.stats_slices[name]]
        assert block[0] == len(batch.rows[name]) + len(other.rows[name])
        np.testing.assert_allclose(block[1:], mech.accumulate({"value": union[name]}))
    assert both[0] == 20_000 and both.shape == (collector.stats_size,)


def test_empty_and_unsampled() -> None:
    collector = MixedCollector(NUMERIC, 1.0)
    est = collector.estimate(collector.empty_stats())
    assert all(e.n == 0 and np.isnan(e.value) and np.isinf(e.stderr) for e in est.values())
    stats = collector.empty_stats()
    stats[0] = 10  # ten devices, none of which sampled anything
    est = collector.estimate(stats)
    assert float(est["load"].value) == 0.0  # the unbiased estimator's 0, i.e. the middle of [-5, 5]
    assert np.isfinite(est["load"].stderr) and float(est["load"].stderr) > 0


def test_bad_input() -> None:
    collector = MixedCollector(NUMERIC, 1.0)
    rng = np.random.default_rng(0)
    good = numeric_records(rng, 10)
    for name, bad in (("age", 17.0), ("load", np.nan), ("battery", 1.5)):
        records = dict(good)
        records[name] = good[name].copy()
        records[name][3] = bad
        with pytest.raises(LDPError):
            collector.perturb(records, rng)
    with pytest.raises(LDPError):
        collector.perturb({"age": good["age"], "load": good["load"]}, rng)
    with pytest.raises(LDPError):
        collector.perturb({**good, "age": good["age"][:5]}, rng)
    with pytest.raises(LDPError):
        MixedCollector(NUMERIC, 0.0)
    with pytest.raises(LDPError):
        MixedCollector(NUMERIC, 1.0, k=4)
    with pytest.raises(LDPError):
        MixedCollector([NUMERIC[0], NUMERIC[0]], 1.0)
    with pytest.raises(LDPError):
        MixedCollector([NumericAttribute("x", 1.0, 0.0)], 1.0)
    with pytest.raises(LDPError):
        MixedCollector([NumericAttribute("x", 0.0, 1.0, mechanism="oue")], 1.0)
    with pytest.raises(LDPError):
        collector.estimate(np.zeros(3))


# --- categorical attributes (the frequency oracles of ldpstream.mechanisms.frequency)
# ------------------------------------------

MIXED = [
    NumericAttribute("age", 18.0, 90.0),
    CategoricalAttribute("os", 4, oracle="grr"),
    CategoricalAttribute("app", 8),
]


def mixed_records(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "age": np.clip(rng.normal(40, 12, n), 18, 90),
        "os": rng.choice(4, size=n, p=[0.5, 0.3, 0.15, 0.05]),
        "app": rng.zipf(1.6, n).clip(1, 8) - 1,
    }


@pytest.mark.parametrize(("eps", "k"), [(1.0, None), (4.0, 2), (3.0, 3)])
def test_categorical_frequencies_unbiased(eps: float, k: int | None) -> None:
    collector = MixedCollector(MIXED, eps, k=k)
    rng = np.random.default_rng(34)
    records = mixed_records(rng, 200_000)
    est = collector.estimate(collector.accumulate(collector.perturb(records, rng)))
    assert abs(float(est["age"].value) - records["age"].mean()) <= 4 * float(est["age"].stderr)
    for name, domain in (("os", 4), ("app", 8)):
        freqs = np.bincount(records[name], minlength=domain) / 200_000
        assert est[name].value.shape == est[name].stderr.shape == (domain,)
        z = np.abs(est[name].value - freqs) / est[name].stderr
        assert np.all(z <= 4), (name, z)


def test_categorical_stderr_matches_replicated_variance() -> None:
    collector = MixedCollector(MIXED, 2.0)
    rng = np.random.default_rng(35)
    records = mixed_records(rng, 2000)
    replicates = 400
    values, variances = [], []
    for _ in range(replicates):
        est = collector.estimate(collector.accumulate(collector.perturb(records, rng)))["os"]
        values.append(est.value)
        variances.append(est.stderr**2)
    ratio = np.var(values, axis=0, ddof=1) / np.mean(variances, axis=0)
    assert np.all(np.abs(ratio - 1) <= 4 * math.sqrt(2 / (replicates - 1))), ratio


def test_unknown_category_rejected() -> None:
    collector = MixedCollector(MIXED, 1.0)
    records = mixed_records(np.random.default_rng(0), 20)
    for bad in (4, -1):
        broken = {**records, "os": records["os"].copy()}
        broken["os"][0] = bad
        with pytest.raises(LDPError):
            collector.perturb(broken, np.random.default_rng(0))
    with pytest.raises(LDPError):
        collector.perturb({**records, "os": records["os"] + 0.5}, np.random.default_rng(0))


def test_chi_square_of_sampling_is_uniform() -> None:
    """Each attribute is sampled by a fraction k/d of devices (uniform sampling without replacement)."""
    collector = MixedCollector(NUMERIC, 5.0)  # k = 2 of 3
    batch = collector.perturb(numeric_records(np.random.default_rng(36), 30_000), np.random.default_rng(37))
    counts = [len(rows) for rows in batch.rows.values()]
    assert sum(counts) == 60_000
    assert stats.chisquare(counts).pvalue > 1e-4


@settings(max_examples=50, deadline=None)
@given(ages=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=12))
def test_numeric_range_validation(ages: list[float]) -> None:
    """A record is accepted exactly when every value lies in its attribute's [lo, hi]."""
    collector = MixedCollector(NUMERIC, 1.0)
    n = len(ages)
    records = {"age": np.array(ages), "load": np.zeros(n), "battery": np.full(n, 0.5)}
    if all(18.0 <= a <= 90.0 for a in ages):
        batch = collector.perturb(records, np.random.default_rng(0))
        assert batch.n == n and sum(len(r) for r in batch.rows.values()) == n * collector.k
    else:
        with pytest.raises(LDPError):
            collector.perturb(records, np.random.default_rng(0))
