"""FactorizationMechanism: the ldpstream.mechanisms.base contract, exact sampling from Q, unbiased answers, standard
errors, files."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy.stats import chi2

import ldpstream.mechanisms.workload.mechanism as mechanism_module
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.baselines import fourier, hierarchical, randomized_response
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism, content_hash
from ldpstream.mechanisms.workload.optimize import optimize_strategy
from ldpstream.mechanisms.workload.workloads import prefix, workload_by_name


@pytest.fixture(scope="module")
def prefix_mechanism() -> FactorizationMechanism:
    """An optimised strategy for the 8-value CDF (prefix workload) at eps = 1."""
    mech = FactorizationMechanism.optimized(prefix(8), 1.0, seed=0)
    np.testing.assert_array_equal(mech.q, optimize_strategy(prefix(8), 1.0, seed=0).q)
    return mech


def simulate(mech: FactorizationMechanism, data: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Output counts of `reps` independent collections from the same devices: (reps, m)."""
    values = np.tile(np.repeat(np.arange(len(data)), data), reps)
    output = mech.perturb(values, rng)["output"]
    rep = np.repeat(np.arange(reps), data.sum())
    return np.bincount(rep * mech.outputs + output, minlength=reps * mech.outputs).reshape(reps, mech.outputs)


def test_doctest_examples_run() -> None:
    assert doctest.testmod(mechanism_module).failed == 0


def test_constructor_checks_privacy_and_the_workload() -> None:
    q = randomized_response(8, 1.0)
    FactorizationMechanism(q, np.eye(8), 1.0)
    with pytest.raises(LDPError, match="violates"):
        FactorizationMechanism(q, np.eye(8), 0.9)
    with pytest.raises(LDPError, match="row space"):
        FactorizationMechanism(fourier(16, 1.0, 1), workload_by_name("3way_marginals", 16), 1.0)
    with pytest.raises(LDPError, match="workload"):
        FactorizationMechanism(q, np.eye(7), 1.0)
    with pytest.raises(LDPError, match="labels"):
        FactorizationMechanism(q, np.eye(8), 1.0, labels=list("aabcdefg"))


@pytest.mark.parametrize("strategy", [randomized_response(5, 2.0), hierarchical(6, 0.5)])
def test_outputs_follow_the_strategy_columns(strategy: np.ndarray) -> None:
    """Per type, a chi-square goodness-of-fit of 20 000 outputs against Q's column, at a 1e-6 false-alarm level."""
    m, n = strategy.shape
    mech = FactorizationMechanism(strategy, np.eye(n), 2.0 if m == 5 else 0.5)
    draws = 20_000
    values = np.repeat(np.arange(n), draws)
    output = mech.perturb(values, np.random.default_rng(1))["output"]
    assert output.dtype == np.int64 and (mech.schema.violations({"output": output}) == "").all()
    counts = np.bincount(values * m + output, minlength=n * m).reshape(n, m)
    expected = draws * strategy.T
    used = expected > 0
    assert (counts[~used] == 0).all()
    stat = (((counts - expected) ** 2)[used] / expected[used]).reshape(n, -1).sum(axis=1)
    assert (stat < chi2.ppf(1 - 1e-6, df=used.sum(axis=1) - 1)).all()


def test_perturb_is_seeded_and_statistics_add(prefix_mechanism: FactorizationMechanism) -> None:
    values = np.random.default_rng(0).integers(0, 8, 5000)
    first = prefix_mechanism.perturb(values, np.random.default_rng(9))
    np.testing.assert_array_equal(first["output"], prefix_mechanism.perturb(values, np.random.default_rng(9))["output"])
    part_a = {"output": first["output"][:1234]}
    part_b = {"output": first["output"][1234:]}
    np.testing.assert_array_equal(
        prefix_mechanism.accumulate(first), prefix_mechanism.accumulate(part_a) + prefix_mechanism.accumulate(part_b)
    )
    assert prefix_mechanism.accumulate(first).shape == (prefix_mechanism.stats_size,)
    np.testing.assert_array_equal(prefix_mechanism.empty_stats(), np.zeros(prefix_mechanism.outputs))


def test_estimates_are_unbiased_with_the_closed_form_variance(prefix_mechanism: FactorizationMechanism) -> None:
    """R seeded collections of N devices: mean within 5 standard errors of the true CDF per query (8 queries), and
    the total empirical variance within 5 sd of the formula (relative sd of a sample variance: sqrt(2/(R-1)))."""
    data = np.array([300, 0, 100, 500, 50, 0, 25, 25])
    n_reports, reps = int(data.sum()), 1500
    counts = simulate(prefix_mechanism, data, reps, np.random.default_rng(4))
    estimates = np.array([prefix_mechanism.estimate(c).value for c in counts])
    truth = np.cumsum(data) / n_reports
    variance = prefix_mechanism.query_variance(data / n_reports, n_reports)
    exact = variance < 1e-15  # the last query (all users) is exact
    assert exact[-1] and np.allclose(estimates[:, exact], truth[exact])
    z = (estimates.mean(axis=0) - truth)[~exact] / np.sqrt(variance[~exact] / reps)
    assert np.abs(z).max() < 5
    empirical = estimates.var(axis=0, ddof=1).sum()
    assert abs(empirical / variance.sum() - 1) < 5 * np.sqrt(2 / (reps - 1))


def test_plug_in_standard_error_matches_the_truth_at_large_n(prefix_mechanism: FactorizationMechanism) -> None:
    """With 10^6 reports the estimated type fractions are within ~1e-2 of the truth, so the plug-in standard error
    is within a few percent of the standard error at the true data; and the answers lie within 4 of them."""
    data = np.array([1, 2, 3, 4, 4, 3, 2, 1]) * 25_000
    counts = simulate(prefix_mechanism, data, 1, np.random.default_rng(8))[0]
    est = prefix_mechanism.estimate(counts)
    assert est.n == data.sum()
    true_se = np.sqrt(prefix_mechanism.query_variance(data / data.sum(), data.sum()))
    np.testing.assert_allclose(est.stderr[:-1], true_se[:-1], rtol=0.05)
    assert (np.abs(est.value - np.cumsum(data) / data.sum()) <= 4 * true_se + 1e-12).all()


def test_labels_map_values_to_types() -> None:
    labels = np.array(["a", "b", "c", "d"])
    mech = FactorizationMechanism(randomized_response(4, 3.0), np.eye(4), 3.0, labels=labels)
    np.testing.assert_array_equal(mech.type_index(np.array(["d", "a", "c"])), [3, 0, 2])
    with pytest.raises(LDPError, match="not in the labels"):
        mech.perturb(np.array(["a", "z"]), np.random.default_rng(0))


@pytest.mark.parametrize(
    "values", [np.array([0, 8]), np.array([-1]), np.array([0.5]), np.array([[0, 1]]), np.array(["a"])]
)
def test_bad_values_are_rejected(values: np.ndarray) -> None:
    mech = FactorizationMechanism(randomized_response(8, 1.0), np.eye(8), 1.0)
    with pytest.raises(LDPError):
        mech.perturb(values, np.random.default_rng(0))


def test_bad_reports_and_statistics_are_rejected(prefix_mechanism: FactorizationMechanism) -> None:
    with pytest.raises(LDPError, match="invalid reports"):
        prefix_mechanism.accumulate({"output": np.array([0, prefix_mechanism.outputs])})
    with pytest.raises(LDPError):
        prefix_mechanism.accumulate({"wrong": np.array([0])})
    with pytest.raises(LDPError, match="no reports"):
        prefix_mechanism.estimate(prefix_mechanism.empty_stats())
    with pytest.raises(LDPError, match="statistics"):
        prefix_mechanism.estimate(np.ones(3))
    with pytest.raises(LDPError, match="statistics"):
        prefix_mechanism.estimate(-np.ones(prefix_mechanism.outputs))


def test_save_and_load_pin_the_strategy_by_hash(tmp_path, prefix_mechanism: FactorizationMechanism) -> None:
    path = tmp_path / "strategy.npz"
    digest = prefix_mechanism.save(path)
    assert digest == prefix_mechanism.hash == content_hash(prefix_mechanism.q, prefix_mechanism.w, 1.0)
    loaded = FactorizationMechanism.load(path, expected_hash=digest)
    np.testing.assert_array_equal(loaded.q, prefix_mechanism.q)
    np.testing.assert_array_equal(loaded.w, prefix_mechanism.w)
    assert loaded.epsilon == 1.0 and loaded.hash == digest
    with pytest.raises(LDPError, match="expected hash"):
        FactorizationMechanism.load(path, expected_hash="0" * 64)
    # a file whose content no longer matches its stored hash
    with np.load(path) as data:
        arrays = dict(data)
    arrays["w"] = arrays["w"] * 2
    np.savez(tmp_path / "tampered.npz", **arrays)
    with pytest.raises(LDPError, match="stored hash"):
        FactorizationMechanism.load(tmp_path / "tampered.npz")
    with pytest.raises(LDPError, match="cannot read"):
        FactorizationMechanism.load(tmp_path / "missing.npz")
    labelled = FactorizationMechanism(randomized_response(3, 1.0), np.eye(3), 1.0, labels=["x", "y", "z"])
    labelled.save(tmp_path / "labelled.npz")
    assert FactorizationMechanism.load(tmp_path / "labelled.npz").labels.tolist() == ["x", "y", "z"]
    assert labelled.hash != FactorizationMechanism(randomized_response(3, 1.0), np.eye(3), 1.5).hash
