"""Frequency oracles: contract checks, exact pmf / support probabilities / epsilon-LDP, 004's closed forms, pitfalls."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate, LDPError, Reports
from ldpstream.mechanisms.frequency import BLH, GRR, OLH, OUE, SUE, FrequencyOracle, HadamardResponse, choose_frequency
from ldpstream.mechanisms.frequency.base import MAX_DOMAIN_SIZE, MAX_EPSILON
from ldpstream.mechanisms.frequency.local_hash import HASH_PRIME, LocalHash, hash_buckets
from ldpstream.mechanisms.frequency.unary import bernoulli_bits, bit_column_sums
from ldpstream.mechanisms.postprocess import make_consistent
from tests.mechanisms.checks import CHECKS, EPSILONS, MechanismCase, Z

NAMES = tuple(registry.FREQUENCY)  # every registered oracle goes through the checks below
K = 12  # not a power of 2: the Hadamard response pads it to 16
# A skewed distribution with four values nobody holds (the rare-value limit of 004 Table 1).
TRUE_FREQS = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05, 0.0, 0.0, 0.0, 0.0])


def one_hot(values: np.ndarray, k: int) -> np.ndarray:
    return (np.asarray(values)[:, None] == np.arange(k)).astype(np.float64)


def frequency_case(name: str) -> MechanismCase:
    """The contract checks see a frequency oracle as K unbiased per-user terms (1{v in Support} - q) / (p - q)."""

    def contributions(oracle: FrequencyOracle, reports: Reports) -> np.ndarray:
        return (oracle.support_matrix(reports) - oracle.q) / (oracle.p - oracle.q)

    return MechanismCase(
        name=name,
        make=lambda eps: registry.make(name, eps, K),
        sample_values=lambda rng, n: rng.choice(K, size=n, p=TRUE_FREQS),
        expected=lambda oracle, values: one_hot(values, K),
        contributions=contributions,
        # Per-user variance of those terms: the closed form n * Var at f = 1 for the own value, at f = 0 otherwise.
        variance=lambda oracle, values: oracle.variance(one_hot(values, K)),
        bad_values=([K], [-1], [1.5], [np.nan], [0, np.inf], ["a"], np.zeros((2, 2), dtype=int), [True]),
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, eps: float, check) -> None:
    check(frequency_case(name), eps)


# --- the exact output distribution -----------------------------------------------------------------------------


def all_reports(oracle: FrequencyOracle, seeds: int = 0) -> Reports:
    """Every possible report (for local hashing: every bucket for each of `seeds` seeds, boundary seeds included)."""
    k = oracle.domain_size
    if isinstance(oracle, GRR):
        return {"value": np.arange(k, dtype=np.uint32)}
    if isinstance(oracle, (SUE, OUE)):
        return {"bits": np.array(list(itertools.product((0, 1), repeat=k)), dtype=np.uint8)}
    if isinstance(oracle, HadamardResponse):
        rows, bits = np.meshgrid(np.arange(oracle.rows), (0, 1), indexing="ij")
        return {"row": rows.ravel().astype(np.uint32), "bit": bits.ravel().astype(np.uint8)}
    assert isinstance(oracle, LocalHash)
    rng = np.random.default_rng(11)
    a = np.concatenate([[1, HASH_PRIME - 1], rng.integers(1, HASH_PRIME, seeds)])
    b = np.concatenate([[0, HASH_PRIME - 1], rng.integers(0, HASH_PRIME, seeds)])
    a, y = np.meshgrid(a, np.arange(oracle.g), indexing="ij")
    b = np.repeat(b, oracle.g)
    return {"a": a.ravel().astype(np.uint32), "b": b.astype(np.uint32), "y": y.ravel().astype(np.uint32)}


def seed_probability(oracle: FrequencyOracle) -> float:
    """Pr of one report's seed part (local hashing: (a, b)); 1 for oracles whose outputs `all_reports` lists fully."""
    return 1.0 / ((HASH_PRIME - 1) * HASH_PRIME) if isinstance(oracle, LocalHash) else 1.0


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", NAMES)
def test_exact_pmf_support_probabilities_and_ldp(name: str, eps: float) -> None:
    """Summing the stated pmf over every output: total 1, Pr[own value supported] = p, other values q (local
    hashing: given the seed, q averaged over seeds is in test_frequency_hashing), and the worst log-ratio is eps."""
    oracle = registry.make(name, eps, 5)
    reports = all_reports(oracle, seeds=20)
    values = np.arange(5)
    pmf = oracle.pmf(reports, values)  # (outputs, values)
    support = oracle.support_matrix(reports)  # (outputs, values)
    seeds = 1 if not isinstance(oracle, LocalHash) else pmf.shape[0] // oracle.g
    total = pmf.sum(axis=0) / (seed_probability(oracle) * seeds)
    np.testing.assert_allclose(total, 1.0, rtol=1e-12)
    own = (pmf * support).sum(axis=0) / (seed_probability(oracle) * seeds)
    np.testing.assert_allclose(own, oracle.p, rtol=1e-12)
    if not isinstance(oracle, LocalHash):
        supported = pmf.T @ support  # [u, v] = Pr[v in Support | true u]
        off_diagonal = supported[~np.eye(5, dtype=bool)]
        np.testing.assert_allclose(off_diagonal, oracle.q, rtol=1e-12)
    log_pmf = oracle.log_pmf(reports, values)
    worst = (log_pmf.max(axis=1) - log_pmf.min(axis=1)).max()
    assert worst <= eps + 1e-12
    assert worst >= eps - 1e-12  # the budget is used in full: some output is e^eps times likelier under some value


def output_index(oracle: FrequencyOracle, reports: Reports) -> np.ndarray:
    """The position of each report in `all_reports(oracle)` (oracles with an enumerable output space)."""
    if isinstance(oracle, GRR):
        return reports["value"].astype(np.int64)
    if isinstance(oracle, HadamardResponse):
        return reports["row"].astype(np.int64) * 2 + reports["bit"]
    return reports["bits"].astype(np.int64) @ (1 << np.arange(oracle.domain_size - 1, -1, -1))


@pytest.mark.parametrize("name", ["grr", "sue", "oue", "hadamard"])
def test_samples_follow_the_stated_pmf(name: str) -> None:
    """Chi-square goodness of fit of perturb's outputs against the pmf, for every true value."""
    oracle = registry.make(name, 1.0, 4)
    outputs = all_reports(oracle)
    rng = np.random.default_rng(21)
    n = 100_000
    for v in range(4):
        observed = np.bincount(
            output_index(oracle, oracle.perturb(np.full(n, v), rng)), minlength=len(outputs[next(iter(outputs))])
        )
        expected = oracle.pmf(outputs, [v])[:, 0] * n
        assert stats.chisquare(observed, expected).pvalue > 1e-4, f"{name}, value {v}"


def test_local_hash_samples_follow_the_stated_pmf() -> None:
    """Given its seed, a local-hash report keeps H(v) with probability p and spreads the rest evenly (chi-square)."""
    oracle = OLH(2.0, 64)
    n = 200_000
    reports = oracle.perturb(np.full(n, 37), np.random.default_rng(22))
    shift = (reports["y"].astype(np.int64) - hash_buckets(reports["a"], reports["b"], 37, oracle.g)) % oracle.g
    expected = np.r_[oracle.p, np.full(oracle.g - 1, (1 - oracle.p) / (oracle.g - 1))] * n
    assert stats.chisquare(np.bincount(shift, minlength=oracle.g), expected).pvalue > 1e-4


# --- 004's closed forms ------------------------------------------------------------------------------------------


def table1(name: str, eps: float, k: int) -> float:
    """004 Table 1, Var[c(i)] / n (= n Var[f_hat]) for a rare value."""
    e = math.exp(eps)
    return {
        "grr": (k - 2 + e) / (e - 1) ** 2,
        "sue": math.exp(eps / 2) / (math.exp(eps / 2) - 1) ** 2,
        "oue": 4 * e / (e - 1) ** 2,
        "blh": (e + 1) ** 2 / (e - 1) ** 2,
        "hadamard": (e + 1) ** 2 / (e - 1) ** 2,  # the pure protocol with p = e/(e+1), q = 1/2, as BLH
        "olh": 4 * e / (e - 1) ** 2,  # at g = e^eps + 1; see test_olh_variance_for_the_rounded_g
    }[name]


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", ["grr", "sue", "oue", "hadamard"])
def test_worst_case_variance_is_table1(name: str, eps: float) -> None:
    assert registry.make(name, eps, 100).worst_case_variance() == pytest.approx(table1(name, eps, 100), rel=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_blh_variance_is_table1_up_to_hash_rounding(eps: float) -> None:
    """BLH's q* is 1/2 up to O(g / P) (unequal buckets of the prime field); the variance moves by < 1e-6."""
    blh = BLH(eps, 100)
    assert abs(blh.q - 0.5) < 2 / HASH_PRIME
    assert blh.worst_case_variance() == pytest.approx(table1("blh", eps, 100), rel=1e-6)


@pytest.mark.parametrize("eps", [*EPSILONS, math.log(3.0), math.log(7.0)])
def test_olh_variance_for_the_rounded_g(eps: float) -> None:
    """With g = round(e^eps) + 1: p = e^eps / (e^eps + g - 1), q ~ 1/g and n Var = q (1 - q) / (p - q)^2, which is
    Table 1's 4 e^eps / (e^eps - 1)^2 when e^eps is an integer and larger otherwise (g = e^eps + 1 is optimal)."""
    olh = OLH(eps, 100)
    e = math.exp(eps)
    g = round(e) + 1
    assert olh.g == g
    assert olh.p == pytest.approx(e / (e + g - 1), rel=1e-15)
    assert olh.q == pytest.approx(1 / g, rel=2 * g / HASH_PRIME)
    # q* = 1/g + O(1/P) moves the variance by a relative O(g / P) (test_frequency_hashing checks q* exactly)
    hash_rtol = 4 * g / HASH_PRIME
    derived = (1 / g) * (1 - 1 / g) / (olh.p - 1 / g) ** 2
    assert olh.worst_case_variance() == pytest.approx(derived, rel=hash_rtol)
    assert olh.worst_case_variance() >= table1("olh", eps, 100) * (1 - hash_rtol)
    if abs(e - round(e)) < 1e-9:
        assert olh.worst_case_variance() == pytest.approx(table1("olh", eps, 100), rel=hash_rtol)


@pytest.mark.parametrize("name", NAMES)
def test_variance_is_linear_in_the_frequency(name: str) -> None:
    """n Var = q(1-q)/(p-q)^2 + f (1-p-q)/(p-q): at f = 1 it is p(1-p)/(p-q)^2, the variance of the own bit."""
    oracle = registry.make(name, 1.0, 8)
    p, q = oracle.p, oracle.q
    np.testing.assert_allclose(oracle.variance([0.0, 1.0]), [q * (1 - q), p * (1 - p)] / np.array((p - q) ** 2))
    with pytest.raises(LDPError):
        oracle.variance([1.5])
    with pytest.raises(LDPError):
        oracle.variance([np.nan])


def test_estimate_stderr_uses_the_clipped_estimate() -> None:
    oracle = OUE(1.0, 3)
    n = 1000
    stats_ = np.array([0.0, n * oracle.q, n, n])  # value 0 never supported (f_hat < 0), value 2 always (f_hat > 1)
    est = oracle.estimate(stats_)
    assert est.value[0] < 0 and est.value[1] == pytest.approx(0.0, abs=1e-12) and est.value[2] > 1
    np.testing.assert_allclose(est.stderr**2 * n, oracle.variance([0.0, 0.0, 1.0]))


@pytest.mark.parametrize("name", NAMES)
def test_an_empty_batch_is_a_batch(name: str) -> None:
    oracle = registry.make(name, 1.0, 5)
    reports = oracle.perturb(np.array([], dtype=np.int64), np.random.default_rng(0))
    assert all(len(col) == 0 for col in reports.values())
    np.testing.assert_array_equal(oracle.accumulate(reports), oracle.empty_stats())


def test_estimate_of_no_reports_and_bad_statistics() -> None:
    oracle = GRR(1.0, 4)
    est = oracle.estimate(oracle.empty_stats())
    assert est.n == 0 and np.isnan(est.value).all() and np.isinf(est.stderr).all()
    for bad in ([1.0, 2.0], [1, 1, 1, 1, -1], [5, 0, 0, 0, 4], [0, 0, 0, 0, 2.5], [np.nan, 0, 0, 0, 1]):
        with pytest.raises(LDPError):
            oracle.estimate(np.asarray(bad, dtype=np.float64))


# --- pitfalls -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [SUE, OUE])
def test_unary_true_bit_is_set_with_probability_p_exactly(cls: type[FrequencyOracle]) -> None:
    """Pr[y[v] = 1 | v] = p exactly in the pmf, and in samples (not p + (1 - p) q, which is > 10 std errors away)."""
    oracle = cls(1.0, 6)
    outputs = all_reports(oracle)
    pmf = oracle.pmf(outputs, [2])[:, 0]
    assert pmf[outputs["bits"][:, 2] == 1].sum() == pytest.approx(oracle.p, rel=1e-12)
    n = 400_000
    bits = oracle.perturb(np.full(n, 2), np.random.default_rng(31))["bits"]
    rate = bits[:, 2].mean()
    stderr = math.sqrt(oracle.p * (1 - oracle.p) / n)
    assert abs(rate - oracle.p) <= Z * stderr
    wrong = oracle.p + (1 - oracle.p) * oracle.q
    assert abs(rate - wrong) > 10 * stderr
    others = np.delete(bits, 2, axis=1).mean()
    assert abs(others - oracle.q) <= Z * math.sqrt(oracle.q * (1 - oracle.q) / (5 * n))


@pytest.mark.parametrize("eps", [0.5, 1.3, 2.0])
def test_olh_client_and_server_use_the_same_p_and_q_for_the_rounded_g(eps: float) -> None:
    """The client keeps H(v) with the server's p (that of the rounded g, not 1/2 of g = e^eps + 1), and the server's
    q is what reports of other values support: both rates are within 4 std errors of the estimator's p and q."""
    oracle = OLH(eps, 40)
    assert oracle.p != pytest.approx(0.5, abs=0.01)  # e^eps is far from an integer at these eps
    n = 300_000
    reports = oracle.perturb(np.full(n, 7), np.random.default_rng(32))
    support = oracle.support_matrix(reports)
    kept = support[:, 7].mean()
    assert abs(kept - oracle.p) <= Z * math.sqrt(oracle.p * (1 - oracle.p) / n)
    assert abs(kept - 0.5) > 10 * math.sqrt(0.25 / n)
    other = np.delete(support, 7, axis=1).mean()  # 39 values, correlated within a report: a loose but valid bound
    assert abs(other - oracle.q) <= Z * math.sqrt(oracle.q * (1 - oracle.q) / n)
    est = oracle.estimate(oracle.accumulate(reports))
    truth = (np.arange(40) == 7).astype(float)
    assert np.all(np.abs(est.value - truth) <= Z * est.stderr)


def test_raw_estimate_stays_next_to_the_post_processed_one() -> None:
    """make_consistent keeps the unbiased estimate (negative entries, sum != 1) and its stderr untouched."""
    oracle = OLH(1.0, 50)
    rng = np.random.default_rng(33)
    values = rng.choice(5, size=20_000)  # 45 values nobody holds: many negative raw estimates
    est = oracle.estimate(oracle.accumulate(oracle.perturb(values, rng)))
    for method in ("norm_sub", "project"):
        out = make_consistent(est, method)
        assert out.raw is est and out.method == method
        assert (est.value < 0).any() and (out.value >= 0).all()
        assert out.value.sum() == pytest.approx(1.0)
        assert not np.allclose(out.value, est.value)
    with pytest.raises(LDPError):
        make_consistent(est, "softmax")  # type: ignore[arg-type]
    with pytest.raises(LDPError):
        make_consistent(Estimate(n=0, value=np.full(3, np.nan), stderr=np.full(3, np.inf)))


@pytest.mark.parametrize("prob", [0.0, 1 / 256, 0.25, 1 / 3, 0.5 + 1e-9, 255.5 / 256])
def test_bernoulli_bits_have_the_stated_probability(prob: float) -> None:
    """One byte per bit, a float on ties: the rate is prob within 4 std errors, exactly 0 when prob is 0, and the
    tie branch (prob not a multiple of 1/256) contributes its share."""
    n = 10_000_000
    bits = bernoulli_bits((n // 100, 100), prob, np.random.default_rng(int(prob * 1e6)))
    assert bits.shape == (n // 100, 100) and bits.dtype == bool
    assert abs(bits.mean() - prob) <= Z * math.sqrt(prob * (1 - prob) / n) + 1e-12


@pytest.mark.parametrize("n,k", [(0, 3), (1, 1), (2039, 7), (2040, 7), (2041, 128), (70_001, 13), (300_000, 128)])
def test_bit_column_sums_equal_plain_sums(n: int, k: int) -> None:
    """The eight-bytes-per-add column sums of UE aggregation, at sizes around its 255 x 8-row blocks."""
    bits = (np.random.default_rng(n + k).random((n, k)) < 0.7).astype(np.uint8)
    bits[:, 0] = 1  # a column of all ones: the largest byte-lane counts
    np.testing.assert_array_equal(bit_column_sums(bits), bits.sum(axis=0, dtype=np.int64))
    np.testing.assert_array_equal(bit_column_sums(bits.astype(bool)), bits.sum(axis=0, dtype=np.int64))


# --- reports the aggregator must refuse -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_accumulate_rejects_malformed_reports(name: str) -> None:
    oracle = registry.make(name, 1.0, 6)
    good = oracle.perturb(np.arange(6), np.random.default_rng(41))
    assert (oracle.schema.violations(good) == "").all()
    first = next(iter(good))
    too_big = {k: v.copy() for k, v in good.items()}
    too_big[first] = too_big[first].astype(np.int64)
    too_big[first][0] = np.iinfo(np.uint32).max
    as_float = {**good, first: good[first].astype(np.float64)}
    missing = {k: v for k, v in good.items() if k != first}
    extra = {**good, "other": good[first]}
    column = good[first]
    wrong_row_shape = {**good, first: column[:, None] if column.ndim == 1 else column[:, :-1]}
    negative = {k: v.astype(np.int64) for k, v in good.items()}
    negative[first][0] = -1
    malformed = [too_big, as_float, missing, extra, wrong_row_shape, negative, [1, 2, 3]]
    if len(good) > 1:
        malformed.append({**good, first: column[:-1]})  # ragged columns
    for bad in malformed:
        with pytest.raises(LDPError):
            oracle.accumulate(bad)  # type: ignore[arg-type]


# --- input validation (property-based) -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    k=st.integers(2, 300),
    codes=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=30),
)
def test_codes_are_accepted_exactly_when_in_the_domain(name: str, k: int, codes: list[int]) -> None:
    oracle = registry.make(name, 1.0, k)
    rng = np.random.default_rng(0)
    if all(0 <= c < k for c in codes):
        reports = oracle.perturb(np.array(codes), rng)
        assert (oracle.schema.violations(reports) == "").all()
        assert oracle.accumulate(reports)[-1] == len(codes)
        floats = oracle.perturb(np.array(codes, dtype=np.float64), rng)  # integral floats are codes too
        assert oracle.accumulate(floats)[-1] == len(codes)
    else:
        with pytest.raises(LDPError):
            oracle.perturb(np.array(codes), rng)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not (math.isfinite(x) and x == int(x))),
        st.text(min_size=1, max_size=3),
    ),
)
def test_non_integer_values_are_refused(name: str, value: object) -> None:
    oracle = registry.make(name, 1.0, 10)
    with pytest.raises(LDPError):
        oracle.perturb(
            np.array([0, value], dtype=object if isinstance(value, str) else np.float64), np.random.default_rng(0)
        )


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    eps=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf"))),
    k=st.one_of(st.integers(max_value=1), st.integers(min_value=MAX_DOMAIN_SIZE + 1), st.just(2.5), st.just(True)),
)
def test_bad_epsilon_or_domain_is_refused(name: str, eps: float, k: object) -> None:
    with pytest.raises(LDPError):
        registry.make(name, eps, 10)
    with pytest.raises(LDPError):
        registry.make(name, 1.0, k)  # type: ignore[arg-type]


def test_olh_refuses_an_epsilon_whose_g_exceeds_the_hash_range() -> None:
    with pytest.raises(LDPError):
        OLH(17.0, 10)


@pytest.mark.parametrize("name", NAMES)
def test_epsilon_up_to_the_supported_maximum(name: str) -> None:
    """At eps = MAX_EPSILON everything stays finite (OLH's g is out of its hash range: refused); above it, refused."""
    with pytest.raises(LDPError):
        registry.make(name, MAX_EPSILON * 1.01, 8)
    if name == "olh":
        return
    oracle = registry.make(name, MAX_EPSILON, 8)
    values = np.arange(8)
    est = oracle.estimate(oracle.accumulate(oracle.perturb(np.repeat(values, 100), np.random.default_rng(0))))
    assert np.isfinite(est.stderr).all() and np.isfinite(oracle.worst_case_variance())
    assert np.all(np.abs(est.value - 1 / 8) <= Z * est.stderr + 1e-9)  # GRR and SUE: no noise left at all


# --- auto selection ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.1, *EPSILONS, 6.0])
def test_choose_frequency_is_grr_below_the_analytic_crossover_else_oue_or_olh(eps: float) -> None:
    """From Table 1, GRR beats OUE iff (K - 2 + e^eps) < 4 e^eps, i.e. K < 3 e^eps + 2, and OUE beats SUE, BLH and
    Hadamard at every eps. OLH at the rounded g is within a hair of OUE (its exact hash, with a != 0, collides a
    relative O(1/P) less than an ideal one, which can put it just below OUE), so above the crossover the choice is
    one of the two. Domain sizes within 0.1% of the crossover are left out (ties up to that hair)."""
    crossover = 3 * math.exp(eps) + 2
    for k in sorted({2, 3, math.floor(crossover * 0.999), math.ceil(crossover * 1.001), 1024, 5000}):
        if k < 2:
            continue
        chosen = choose_frequency(eps, k)
        assert chosen == "grr" if k < crossover else chosen in ("oue", "olh"), (eps, k, chosen)


def test_choose_frequency_is_the_argmin_and_breaks_ties_by_report_size() -> None:
    for eps, k in itertools.product((0.5, 1.0, 2.0, 4.0), (2, 8, 64, 1024)):
        variances = {name: registry.make(name, eps, k).worst_case_variance() for name in NAMES}
        assert variances[choose_frequency(eps, k)] <= min(variances.values()) * (1 + 1e-6)
    # e^eps = 3: OLH (g = 4, p = 1/2) ties OUE; OLH's report is 50 bits, OUE's K bits.
    assert choose_frequency(math.log(3.0), 1024) == "olh"
    assert choose_frequency(math.log(3.0), 40) == "oue"
    assert choose_frequency(math.log(3.0), 10) == "grr"
    with pytest.raises(LDPError):
        choose_frequency(0.0, 10)
