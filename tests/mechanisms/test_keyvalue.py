"""Key-value mechanisms (PrivKV, PCKV-UE, PCKV-GRR): contract checks, frequency and mean per key within 4 standard
errors, the ratio mean's delta-method variance over repeated collections, exact epsilon by enumerating every output
of small domains, perturb against the pmf it claims, and the auditor.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import audit_mechanism
from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.keyvalue.base import EMPTY, KeyValueMechanism, check_pairs, pairs_array
from ldpstream.mechanisms.keyvalue.pckv import PCKV
from tests.mechanisms.checks import CHECKS, MechanismCase, Z

NAMES = tuple(registry.KEYVALUE)  # every registered key-value mechanism goes through the checks below
D = 4
PADDING = 2
HOLD = np.array([0.5, 0.3, 0.15, 0.05])  # each device holds key k with this probability, independently
MEANS = np.array([0.4, -0.3, 0.8, 0.0])
SEED = 12


def make(name: str, eps: float, d: int = D, padding: int = PADDING) -> KeyValueMechanism:
    return registry.make_keyvalue(name, eps, d, padding)


def population(rng: np.random.Generator, n: int, spread: float = 0.3) -> np.ndarray:
    """A pairs array of n devices: key k held w.p. HOLD[k] (so some hold 3 or 4 pairs > l), values around MEANS."""
    held = rng.random((n, D)) < HOLD
    values = np.clip(MEANS + spread * rng.standard_normal((n, D)), -1, 1)
    return np.stack([np.where(held, np.arange(D), EMPTY), np.where(held, values, 0.0)], axis=2).astype(np.float64)


def dense(mech: KeyValueMechanism, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(selection r (n, d), value per key (n, d), 0 where not held)."""
    keys, values = check_pairs(pairs, mech.domain_size)
    v = np.zeros((keys.shape[0], mech.domain_size))
    rows, slots = np.nonzero(keys != EMPTY)
    v[rows, keys[rows, slots]] = values[rows, slots]
    return mech.selection(keys), v


def expected(mech: KeyValueMechanism, pairs: np.ndarray) -> np.ndarray:
    """Per device, what its terms estimate: [r / rho, r v / rho] (= [1{k in S}, 1{k in S} v] when |S| <= l)."""
    r, v = dense(mech, pairs)
    return np.hstack([r, r * v]) / mech.holder_rate


def contributions(mech: KeyValueMechanism, reports: Reports) -> np.ndarray:
    x, y = mech.per_device_terms(reports)
    rho = mech.holder_rate
    return np.hstack([x / (rho * mech.frequency_gain), y / (rho * mech.value_gain)])


def variance(mech: KeyValueMechanism, pairs: np.ndarray) -> np.ndarray:
    var_f, var_s, _ = mech.per_device_covariance(*dense(mech, pairs))
    return np.hstack([var_f, var_s])


def keyvalue_case(name: str) -> MechanismCase:
    return MechanismCase(
        name=name,
        make=lambda eps: make(name, eps),
        sample_values=population,
        expected=expected,  # type: ignore[arg-type]
        contributions=contributions,  # type: ignore[arg-type]
        variance=variance,  # type: ignore[arg-type]
        bad_values=(
            pairs_array([{D: 0.5}]),  # a key outside the domain
            pairs_array([{0: 1.5}]),  # a value outside [-1, 1]
            pairs_array([{0: math.nan}]),
            np.array([[[0.5, 0.0]]]),  # a key that is not an integer
            np.array([[[1.0, 0.2], [1.0, -0.2]]]),  # a key held twice
            np.zeros((3, 2)),  # not (n, slots, 2)
            np.array([[["a", "b"]]]),
        ),
        n=100_000,
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0])
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, eps: float, check: object) -> None:
    check(keyvalue_case(name), eps)  # type: ignore[operator]


def test_terms_estimate_the_truth_when_sets_fit_the_padding() -> None:
    """r / rho is 1{k in S} for PCKV when |S| <= l, and l / |S| below 1 when |S| > l (the paper's bias); PrivKV's
    r / rho is always 1{k in S}."""
    pairs = pairs_array([{0: 0.5}, {0: 0.5, 1: -0.5}, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}], slots=4)
    np.testing.assert_allclose(expected(make("pckv-ue", 1.0), pairs)[:, :D],
                               [[1, 0, 0, 0], [1, 1, 0, 0], [0.5, 0.5, 0.5, 0.5]])
    np.testing.assert_allclose(expected(make("privkv", 1.0), pairs)[:, :D],
                               [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize("eps", [1.0, 4.0])
@pytest.mark.parametrize("name", NAMES)
def test_frequency_and_mean_per_key_within_4_standard_errors(name: str, eps: float) -> None:
    """On sets that fit the padding (l = D), f_hat and the ratio m_hat land within 4 of their own standard errors."""
    rng = np.random.default_rng(11)
    pairs = population(rng, 200_000)
    keys, values = check_pairs(pairs, D)
    held = keys != EMPTY
    freq = held.mean(axis=0)
    mean = (values * held).sum(axis=0) / held.sum(axis=0)
    mech = make(name, eps, padding=D)
    stats = mech.accumulate(mech.perturb(pairs, rng))
    f_hat, m_hat = mech.estimate(stats), mech.estimate_means(stats)
    assert np.all(np.abs(f_hat.value[0] - freq) <= Z * f_hat.stderr[0])
    assert np.all(np.abs(m_hat.value - mean) <= Z * m_hat.stderr)


@pytest.mark.parametrize("name", NAMES)
def test_ratio_mean_variance_over_repeated_collections(name: str) -> None:
    """The delta-method Var[m_hat] (`mean_variance`) against the spread of m_hat over T collections of n devices
    whose holders all have the value m_k (so the closed form is exact to first order). The sample variance of T
    draws has relative sd sqrt((kappa - 1) / T), kappa the draws' kurtosis (2 / T for a normal): m_hat is a ratio
    with a heavier tail than a normal, so kappa is estimated from the same draws. 4 of those, plus 10% for the
    O(1/n) terms the delta method drops."""
    trials, n, eps = 300, 4000, 2.0
    mech = make(name, eps, padding=D)
    rng = np.random.default_rng(SEED)
    pairs = population(rng, trials * n, spread=0.0)
    reports = mech.perturb(pairs, rng)
    m_hat, f_hat = [], []
    for t in range(trials):  # one collection per trial: a test loop, not a hot path
        stats = mech.accumulate({k: col[t * n : (t + 1) * n] for k, col in reports.items()})
        m_hat.append(mech.estimate_means(stats).value)
        f_hat.append(mech.estimate(stats).value[0])
    # The keys whose f_hat sits at least 5 of its standard errors above 0: there the first-order terms dominate
    # (the delta method's relative error is O(1/z^2), 4% here) and f_hat <= 0 (m_hat undefined) has probability < 3e-7.
    z = HOLD / np.sqrt(mech.frequency_variance(HOLD) / n)
    keys = np.flatnonzero(z >= 5)
    assert keys.size >= 1, z
    draws = np.array(m_hat)[:, keys]
    empirical = np.var(draws, axis=0, ddof=1)
    centred = draws - draws.mean(axis=0)
    kurtosis = np.mean(centred**4, axis=0) / np.mean(centred**2, axis=0) ** 2
    closed = mech.mean_variance(HOLD[keys], MEANS[keys]) / n
    tolerance = Z * np.sqrt(np.maximum(kurtosis - 1, 2) / (trials - 1)) + 0.1
    assert np.all(np.abs(empirical / closed - 1) <= tolerance), (empirical, closed)
    empirical_f = np.var(np.array(f_hat), axis=0, ddof=1)
    closed_f = mech.frequency_variance(HOLD) / n
    assert np.all(np.abs(empirical_f / closed_f - 1) <= Z * math.sqrt(2 / (trials - 1)))


# --- exact epsilon by enumeration ---------------------------------------------------------------------------------


def every_report(mech: KeyValueMechanism) -> Reports:
    """Every possible report of a small mechanism, as one batch."""
    names = [c.name for c in mech.schema.columns]
    if names == ["bits"]:
        rows = np.array(list(itertools.product((-1, 0, 1), repeat=mech.domain_size)), dtype=np.int8)
        return {"bits": rows}
    keys = int(mech.schema.columns[0].high) + 1
    allowed = mech.schema.columns[1].allowed
    assert allowed is not None
    grid = np.array(list(itertools.product(range(keys), allowed)))
    return {"key": grid[:, 0].astype(np.uint32), "value": grid[:, 1].astype(np.int8)}


def every_set(d: int) -> np.ndarray:
    """Every set over d keys with values at the extremes and one inside (a pairs array)."""
    sets = []
    for size in range(d + 1):
        for keys in itertools.combinations(range(d), size):
            for values in itertools.product((-1.0, 0.3, 1.0), repeat=size):
                sets.append(dict(zip(keys, values, strict=True)))
    return pairs_array(sets, slots=d)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize(("d", "padding"), [(2, 1), (2, 2), (3, 2)])
@pytest.mark.parametrize("name", NAMES)
def test_exact_epsilon_by_enumeration(name: str, d: int, padding: int, eps: float) -> None:
    """Every output's probability under every set: a distribution per set, and the largest log-ratio of two sets'
    probabilities of one output never exceeds `exact_epsilon` (the bound derived in the modules for one sampled
    pair) nor eps. With l = 1 a one-pair set is reported without dummies, so the bound is reached exactly; with
    l > 1 every small set is a mixture with dummies, which can only lower it."""
    mech = make(name, eps, d=d, padding=padding)
    channel = np.exp(mech.log_pmf(every_report(mech), every_set(d)))  # (outputs, sets)
    np.testing.assert_allclose(channel.sum(axis=0), 1.0, rtol=1e-12)
    logs = np.log(channel)
    exact = float((logs.max(axis=1) - logs.min(axis=1)).max())
    bound = mech.exact_epsilon()  # type: ignore[attr-defined]
    assert exact <= bound * (1 + 1e-9) and bound <= eps * (1 + 1e-12)
    if padding == 1 or not isinstance(mech, PCKV):
        assert exact == pytest.approx(bound, rel=1e-9)
    if isinstance(mech, PCKV):
        assert bound == pytest.approx(eps, rel=1e-12)  # PCKV's allocation spends exactly eps


@pytest.mark.parametrize("name", NAMES)
def test_perturb_samples_the_pmf(name: str) -> None:
    """The empirical frequency of every output of `perturb` matches `log_pmf` within 4.5 binomial standard errors
    (per output and set, 3 sets), so the privacy enumeration is about the reports actually sent."""
    mech = make(name, 1.5, d=2, padding=2)
    sets = pairs_array([{0: 0.6}, {0: -1.0, 1: 0.2}, {}], slots=2)
    outputs = every_report(mech)
    columns = list(outputs)
    probs = np.exp(mech.log_pmf(outputs, sets))
    n = 100_000
    rng = np.random.default_rng(13)
    for i in range(len(sets)):
        reports = mech.perturb(np.repeat(sets[i : i + 1], n, axis=0), rng)
        joined = np.stack([np.asarray(reports[c], dtype=np.int64).reshape(n, -1) for c in columns], axis=1)
        table = np.stack([np.asarray(outputs[c], dtype=np.int64).reshape(len(probs), -1) for c in columns], axis=1)
        counts = (joined.reshape(n, 1, -1) == table.reshape(1, len(probs), -1)).all(axis=2).sum(axis=0)
        p = probs[:, i]
        assert np.all(np.abs(counts - n * p) <= 4.5 * np.sqrt(n * p * (1 - p)) + 1e-9), (counts, n * p)


@pytest.mark.parametrize("name", NAMES)
def test_auditor_finds_no_more_than_the_exact_epsilon(name: str) -> None:
    """At l = 1 the audited one-pair sets are reported without dummies, where the exact epsilon is reached."""
    mech = make(name, 1.0, d=3, padding=1)
    exact = mech.exact_epsilon()  # type: ignore[attr-defined]
    result = audit_mechanism(mech, seed=4, n=300_000, n_select=50_000)
    assert 0.7 * exact <= result.epsilon_lower_bound <= exact


def test_privkv_leaves_budget_unused() -> None:
    """PrivKV's even split is charged eps but provides eps/2 + ln(2 e^(eps/2) / (e^(eps/2) + 1)) < eps."""
    for eps in (0.5, 2.0, 6.0):
        half = eps / 2
        assert make("privkv", eps).exact_epsilon() == pytest.approx(  # type: ignore[attr-defined]
            half + math.log(2 * math.exp(half) / (math.exp(half) + 1)), rel=1e-12)


def test_bad_parameters() -> None:
    for padding in (0, -1, 2.5, True, 10_000):
        with pytest.raises(LDPError):
            make("pckv-ue", 1.0, padding=padding)  # type: ignore[arg-type]
    for d in (0, 1.5, "4"):
        with pytest.raises(LDPError):
            make("pckv-grr", 1.0, d=d)  # type: ignore[arg-type]
    with pytest.raises(LDPError):
        registry.make_keyvalue("grr", 1.0, 4)
    with pytest.raises(LDPError):
        make("privkv", 1.0).estimate(np.zeros(3))


def test_no_reports_estimate_nothing() -> None:
    mech = make("pckv-ue", 1.0)
    est, means = mech.estimate(mech.empty_stats()), mech.estimate_means(mech.empty_stats())
    assert est.n == 0 and np.isnan(est.value).all() and np.isinf(means.stderr).all()


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=4, max_side=4),
                  elements=st.floats(allow_nan=True, allow_infinity=True, width=64)))
def test_any_input_array_is_perturbed_or_refused_with_ldp_error(pairs: np.ndarray) -> None:
    """Whatever numbers a caller hands in, a key-value mechanism reports them or raises LDPError, nothing else."""
    for name in NAMES:
        mech = make(name, 1.0)
        try:
            reports = mech.perturb(pairs, np.random.default_rng(0))
        except LDPError:
            continue
        assert (mech.schema.violations(reports) == "").all()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8), st.integers(-3, 12), st.integers(-3, 3))
def test_any_report_is_accumulated_or_refused(n: int, key: int, value: int) -> None:
    """A batch of hostile reports: `accumulate` adds it or raises LDPError, and refuses what the schema refuses."""
    for name in NAMES:
        mech = make(name, 1.0)
        if "bits" in mech.schema.dtypes:
            reports = {"bits": np.full((n, D), value, dtype=np.int8)}
        else:
            reports = {"key": np.full(n, max(key, 0), dtype=np.uint32), "value": np.full(n, value, dtype=np.int8)}
        valid = bool((mech.schema.violations(reports) == "").all())
        try:
            mech.accumulate(reports)
        except LDPError:
            assert not valid or n == 0
            continue
        # accumulate checks whole-batch ranges; PCKV-GRR's allowed values {-1, 1} are the aggregator's per-row check
        assert valid or n == 0 or (name == "pckv-grr" and value == 0)
