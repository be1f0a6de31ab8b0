"""Longitudinal mechanisms: contract checks, exact eps_1 and eps_inf by enumerating the chained channels, the memo.

The privacy tests build each channel from the papers' stage definitions (matrices over every output on small
domains), independently of the classes' formulas, and compute the exact epsilon as the largest log-ratio of an
output's probabilities under two inputs; the classes' claimed budgets and one-report pmfs must match them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError, Mechanism, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.longitudinal import LGRR, LOSUE, LOUE, LSUE, RAPPOR, DBitFlip, OneBitMean
from ldpstream.mechanisms.longitudinal.base import Longitudinal
from ldpstream.mechanisms.longitudinal.memo import draw_secrets, keyed_bits, keyed_words
from ldpstream.mechanisms.longitudinal.two_stage import SolvedTwoStage, TwoStageUnary, instantaneous_bits
from ldpstream.mechanisms.numeric.duchi import duchi_bound_1d
from tests.mechanisms.checks import CHECKS, MechanismCase, check_unbiased, check_variance
from tests.mechanisms.test_frequency import TRUE_FREQS, one_hot

NAMES = tuple(registry.LONGITUDINAL)  # every registered longitudinal mechanism goes through the checks below
K = len(TRUE_FREQS)
LIFETIMES = (1.0, 4.0)
TWO_STAGE = (LGRR, LOUE, LOSUE, LSUE)
BUDGETS = ((1.0, 0.5), (2.0, 1.0), (4.0, 1.0), (3.0, 2.5))  # (eps_inf, eps_1)


def exact_epsilon(channel: np.ndarray) -> float:
    """max over outputs y and inputs u, v of ln(P[y | u] / P[y | v]) for a (inputs, outputs) matrix."""
    logs = np.log(channel)
    return float((logs.max(axis=0) - logs.min(axis=0)).max())


def frequency_contributions(mech: Mechanism, reports: Reports) -> np.ndarray:
    """Per-user unbiased terms whose column means are the estimate (module docstrings of each mechanism)."""
    if isinstance(mech, DBitFlip):
        n, d = reports["bits"].shape[0], mech.sampled
        buckets, bits = reports["buckets"].reshape(n, d), reports["bits"].reshape(n, d)
        terms = np.zeros((n, K))
        delta = mech.p_own - mech.p_other
        np.put_along_axis(terms, buckets.astype(np.int64), (bits - mech.p_other) / delta, axis=1)
        return terms * K / d
    if isinstance(mech, RAPPOR):  # z = m A_c (s - p*) / Delta (rappor's module docstring), cohort by cohort
        terms = np.zeros((reports["bits"].shape[0], K))
        blocks = mech.decoder.reshape(K, mech.cohorts, mech.bloom_bits)
        for cohort in range(mech.cohorts):
            rows = reports["cohort"] == cohort
            terms[rows] = (reports["bits"][rows] - mech.p_star) @ blocks[:, cohort].T
        return terms * mech.cohorts / (mech.q_star - mech.p_star)
    assert isinstance(mech, FrequencyOracle)
    return (mech.support_matrix(reports) / mech.supports_per_report - mech.q) / (mech.p - mech.q)


def longitudinal_case(name: str) -> MechanismCase:
    """The contract checks on one report per device (each row a new device): the chained channel."""
    if registry.longitudinal_class(name).kind == "numeric":
        return MechanismCase(
            name=name,
            make=lambda eps: registry.make(name, eps, gamma=0.1),
            sample_values=lambda rng, n: 2 * rng.beta(2.0, 5.0, n) - 1,
            expected=lambda mech, values: values,
            contributions=lambda mech, reports: reports["value"],
            variance=lambda mech, values: mech.variance(values),  # type: ignore[attr-defined]
            bad_values=([1.5], [np.nan], [0.0, -np.inf]),
        )
    params = {"dbitflip": {"sampled": 3, "gamma": 0.05}}.get(name, {})
    return MechanismCase(
        name=name,
        make=lambda eps: registry.make(name, eps, K, **params),
        sample_values=lambda rng, n: rng.choice(K, size=n, p=TRUE_FREQS),
        expected=lambda mech, values: one_hot(values, K),
        contributions=frequency_contributions,
        variance=lambda mech, values: mech.variance(one_hot(values, K)),  # type: ignore[attr-defined]
        bad_values=([K], [-1], [1.5], [np.nan], ["a"], np.zeros((2, 2), dtype=int)),
        n=100_000,
    )


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", LIFETIMES)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, eps: float, check) -> None:
    check(longitudinal_case(name), eps)


# --- exact privacy of the two-stage oracles -------------------------------------------------------------------


def grr_matrix(p: float, q: float, k: int) -> np.ndarray:
    return np.where(np.eye(k, dtype=bool), p, q)


def bit_vectors(width: int) -> np.ndarray:
    return np.array(list(itertools.product((0, 1), repeat=width)), dtype=bool)


def bitwise_matrix(rows: np.ndarray, p_set: float, p_clear: float) -> np.ndarray:
    """P[output vector | input vector] for independent bits: rows are input bit vectors, columns all outputs."""
    outputs = bit_vectors(rows.shape[1])
    one = np.where(rows[:, None, :], p_set, p_clear)  # P[output bit = 1] per (input, output, bit)
    return np.where(outputs[None, :, :], one, 1 - one).prod(axis=2)


def two_stage_channels(oracle: SolvedTwoStage) -> tuple[np.ndarray, np.ndarray]:
    """(stage 1, stage 1 then stage 2) as (K, outputs) matrices, built from the stage probabilities alone."""
    k = oracle.domain_size
    if isinstance(oracle, LGRR):
        first = grr_matrix(oracle.p1, oracle.q1, k)
        return first, first @ grr_matrix(oracle.p2, oracle.q2, k)
    first = bitwise_matrix(np.eye(k, dtype=bool), oracle.p1, oracle.q1)  # one-hot inputs
    return first, first @ bitwise_matrix(bit_vectors(k), oracle.p2, oracle.q2)


@pytest.mark.parametrize(("lifetime", "first"), BUDGETS)
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("cls", TWO_STAGE)
def test_two_stage_budgets_are_exact(cls: type[SolvedTwoStage], k: int, lifetime: float, first: float) -> None:
    """eps_inf of stage 1 and eps_1 of the chained channel, by enumeration, equal the budgets asked for; the
    oracle's one-report pmf is the chained channel."""
    if cls is LOUE and first >= math.log((2 * math.exp(lifetime) + 1) / 3):
        pytest.skip("beyond L-OUE's reach (test_loue_reach)")
    oracle = cls(lifetime, k, epsilon_first=first)
    permanent, chained = two_stage_channels(oracle)
    assert exact_epsilon(permanent) == pytest.approx(lifetime, abs=1e-12)
    assert exact_epsilon(chained) == pytest.approx(first, abs=1e-12)
    assert oracle.epsilon == first and oracle.epsilon_lifetime == lifetime
    outputs = {"value": np.arange(k, dtype=np.uint32)} if isinstance(oracle, LGRR) else {"bits": bit_vectors(k)}
    np.testing.assert_allclose(oracle.pmf(outputs, np.arange(k)).T, chained, rtol=1e-12)


def published_lgrr_p2(lifetime: float, first: float, k: int) -> float:
    """L-GRR's p2 as published (arXiv:2111.04636; multi-freq-ldpy 0.2.5), in its own notation."""
    p1 = math.exp(lifetime) / (math.exp(lifetime) + k - 1)
    q1 = (1 - p1) / (k - 1)
    e = math.exp(first)
    return (q1 - e * p1) / (-p1 * e + k * q1 * e - q1 * e - p1 * (k - 1) + q1)


@pytest.mark.parametrize("k", [2, 3, 10])
def test_published_lgrr_second_stage_undershoots_for_k_above_2(k: int) -> None:
    """The erratum of two_stage's docstring: the published p2 is exact at K = 2 and spends less than eps_1 above."""
    lifetime, first = 2.0, 1.0
    p2 = published_lgrr_p2(lifetime, first, k)
    chained = grr_matrix(*LGRR.first_stage(lifetime, k), k) @ grr_matrix(p2, (1 - p2) / (k - 1), k)
    if k == 2:
        assert exact_epsilon(chained) == pytest.approx(first, abs=1e-12)
        assert p2 == pytest.approx(LGRR(lifetime, k, epsilon_first=first).p2, rel=1e-12)
    else:
        assert exact_epsilon(chained) < first - 0.04  # K = 3: 0.948, K = 10: 0.699


def test_loue_reach() -> None:
    """With p2 = 1/2 the chained budget is below ln((2 e^eps_inf + 1) / 3), its limit as q2 -> 0."""
    lifetime = 2.0
    reach = math.log((2 * math.exp(lifetime) + 1) / 3)
    near = LOUE(lifetime, 4, epsilon_first=reach - 1e-6)
    assert exact_epsilon(two_stage_channels(near)[1]) == pytest.approx(reach - 1e-6, abs=1e-10)
    with pytest.raises(LDPError, match="L-OUE reaches"):
        LOUE(lifetime, 4, epsilon_first=reach + 1e-6)


def test_losue_one_report_is_oue() -> None:
    """L-OSUE's chained channel has p = 1/2 and q = 1 / (e^eps_1 + 1): one report is OUE at eps_1."""
    oracle = LOSUE(3.0, 16, epsilon_first=1.2)
    assert oracle.p == pytest.approx(0.5, abs=1e-15) and oracle.q == pytest.approx(1 / (math.exp(1.2) + 1), rel=1e-12)


@pytest.mark.parametrize("args", [(1.0, 4, 1.0), (1.0, 4, 2.0), (0.0, 4, None), (1.0, 1, 0.5), (1.0, "a", 0.5)])
def test_two_stage_refuses_bad_budgets(args: tuple) -> None:
    lifetime, k, first = args
    with pytest.raises(LDPError):
        LGRR(lifetime, k, epsilon_first=first)


# --- exact privacy of RAPPOR, dBitFlip and 1BitMean ---------------------------------------------------------------


@pytest.mark.parametrize(("f", "p", "q", "hashes"), [(0.5, 0.5, 0.75, 2), (0.25, 0.3, 0.9, 1), (0.8, 0.1, 0.6, 3)])
def test_rappor_budgets_are_exact(f: float, p: float, q: float, hashes: int) -> None:
    """Per cohort, the PRR and the chained channel over every filter and report, enumerated: the worst ratio between
    two values is the paper's eps_inf and eps_1 in a cohort where their filters are disjoint, and never more; the
    oracle's one-report pmf is the chained channel (the cohort uniform)."""
    k = 3
    oracle = RAPPOR.from_f(k, f, p, q, hashes=hashes, bloom_bits=2 * hashes, cohorts=64)
    outputs = bit_vectors(oracle.bloom_bits)
    irr = bitwise_matrix(outputs, q, p)
    disjoint = (oracle.positions[:, 0, :] != oracle.positions[:, 1, :]).all(axis=1)
    assert disjoint.any() and not disjoint.all()  # both kinds of cohort are enumerated
    for cohort in range(oracle.cohorts):
        filters = np.zeros((k, oracle.bloom_bits), dtype=bool)
        np.put_along_axis(filters, oracle.positions[cohort], True, axis=1)
        permanent = bitwise_matrix(filters, 1 - f / 2, f / 2)
        chained = permanent @ irr
        if disjoint[cohort]:
            assert exact_epsilon(permanent[:2]) == pytest.approx(oracle.epsilon_lifetime, abs=1e-12)
            assert exact_epsilon(chained[:2]) == pytest.approx(oracle.epsilon, abs=1e-12)
        assert exact_epsilon(permanent) <= oracle.epsilon_lifetime + 1e-12
        assert exact_epsilon(chained) <= oracle.epsilon + 1e-12
        reports = {"cohort": np.full(len(outputs), cohort, dtype=np.uint32), "bits": outputs.astype(np.uint8)}
        log_pmf = oracle.log_pmf(reports, np.arange(k)).T + math.log(oracle.cohorts)
        np.testing.assert_allclose(log_pmf, np.log(chained), atol=1e-9)
    assert oracle.epsilon_lifetime == pytest.approx(2 * hashes * math.log((1 - f / 2) / (f / 2)), rel=1e-12)
    q_star, p_star = 0.5 * f * (p + q) + (1 - f) * q, 0.5 * f * (p + q) + (1 - f) * p
    assert oracle.epsilon == pytest.approx(hashes * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star))))


def dbitflip_channel(k: int, d: int, memo_own: float, gamma: float) -> np.ndarray:
    """(K, outputs) P[(buckets, bits) | value] from the paper's definition, then flips with probability gamma."""
    subsets = list(itertools.combinations(range(k), d))
    bits = bit_vectors(d)
    flip = np.array([[1 - gamma, gamma], [gamma, 1 - gamma]])  # [memo bit, reported bit]
    rows = []
    for v in range(k):
        row = []
        for subset in subsets:
            memo_one = np.where(np.array(subset) == v, memo_own, 1 - memo_own)
            reported_one = memo_one * flip[1, 1] + (1 - memo_one) * flip[0, 1]
            row.extend(np.where(bits, reported_one, 1 - reported_one).prod(axis=1) / len(subsets))
        rows.append(row)
    return np.array(rows)


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
@pytest.mark.parametrize(("k", "d"), [(4, 1), (4, 2), (5, 3)])
def test_dbitflip_budgets_are_exact(k: int, d: int, gamma: float) -> None:
    """The paper's bits (e^{eps/2}) spend eps for d >= 2 but eps/2 for d = 1 (the erratum of dbitflip's docstring);
    the class, whose bit takes eps at d = 1, spends eps exactly for every d, and its pmf is the channel."""
    eps = 2.0
    mech = DBitFlip(eps, k, sampled=d, gamma=gamma)
    paper_bit = math.exp(eps / 2) / (math.exp(eps / 2) + 1)
    assert exact_epsilon(dbitflip_channel(k, d, paper_bit, 0.0)) == pytest.approx(eps if d > 1 else eps / 2, abs=1e-12)
    memo_own = paper_bit if d > 1 else math.exp(eps) / (math.exp(eps) + 1)
    assert exact_epsilon(dbitflip_channel(k, d, memo_own, 0.0)) == pytest.approx(mech.epsilon_lifetime, abs=1e-12)
    one_report = dbitflip_channel(k, d, memo_own, gamma)
    assert exact_epsilon(one_report) == pytest.approx(mech.epsilon, abs=1e-12)
    subsets = np.array(list(itertools.combinations(range(k), d)))
    bits = bit_vectors(d)
    shape = (-1, d) if d > 1 else (-1,)
    reports = {
        "buckets": np.repeat(subsets, len(bits), axis=0).astype(np.uint32).reshape(shape),
        "bits": np.tile(bits, (len(subsets), 1)).astype(np.uint8).reshape(shape),
    }
    np.testing.assert_allclose(np.exp(mech.log_pmf(reports, np.arange(k))).T, one_report, rtol=1e-12)


def test_dbitflip_samples_follow_the_channel() -> None:
    mech = DBitFlip(2.0, 4, sampled=2, gamma=0.1)
    channel = dbitflip_channel(4, 2, 1 / (1 + math.exp(-1.0)), 0.1)
    rng = np.random.default_rng(31)
    n = 120_000
    pair_codes = np.array([a * 4 + b for a, b in itertools.combinations(range(4), 2)])  # ascending, like the outputs
    for v in (0, 3):
        reports = mech.perturb(np.full(n, v), rng)
        ranks = np.searchsorted(pair_codes, reports["buckets"].astype(np.int64) @ np.array([4, 1]))
        outputs = ranks * 4 + reports["bits"].astype(np.int64) @ np.array([2, 1])
        observed = np.bincount(outputs, minlength=channel.shape[1])
        assert stats.chisquare(observed, channel[v] * n).pvalue > 1e-4


@pytest.mark.parametrize("gamma", [0.0, 0.2])
@pytest.mark.parametrize("buckets", [1, 4, 7])
def test_one_bit_mean_budgets_are_exact(buckets: int, gamma: float) -> None:
    """P[y = 1 | t] integrated exactly over alpha (round up with probability L) is linear in t, so the worst
    ratio is at t = +-1: eps_1 for one report; the memoized bit of a grid point is eps_lifetime-LDP."""
    eps = 1.5
    mech = OneBitMean(eps, buckets=buckets, gamma=gamma)
    bit = lambda x: 0.5 + 0.5 * x / duchi_bound_1d(eps)  # noqa: E731  (the paper's 1-bit probability)
    t = np.linspace(-1, 1, 1001)
    scaled = (t + 1) * buckets / 2
    low = np.minimum(np.floor(scaled), buckets - 1)
    up = scaled - low
    memo = (1 - up) * bit(2 * low / buckets - 1) + up * bit(2 * (low + 1) / buckets - 1)
    one_report = gamma + (1 - 2 * gamma) * memo
    assert exact_epsilon(np.column_stack([one_report, 1 - one_report])) == pytest.approx(mech.epsilon, abs=1e-12)
    np.testing.assert_allclose(one_report, mech.prob_positive(t), atol=1e-12)
    grid = 2 * np.arange(buckets + 1) / buckets - 1
    memo_channel = np.column_stack([bit(grid), 1 - bit(grid)])
    assert exact_epsilon(memo_channel) == pytest.approx(eps, abs=1e-12) == mech.epsilon_lifetime


# --- the memo --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_a_device_repeats_its_memo_and_only_its_memo(name: str) -> None:
    """Same secret and value: the same memoized part at any position in any batch; the memo never mixes devices."""
    mech = registry.make(name, 2.0, 6) if registry.takes_domain(name) else registry.make(name, 2.0)
    assert isinstance(mech, Longitudinal)
    rng = np.random.default_rng(41)
    secrets = draw_secrets(rng, 300)
    values = rng.integers(0, 6, 300) if registry.takes_domain(name) else rng.uniform(-1, 1, 300)
    order = rng.permutation(300)
    if isinstance(mech, OneBitMean):
        first, again = mech.rounded(values, secrets), mech.rounded(values[order], secrets[order])
    elif isinstance(mech, DBitFlip):
        first, again = mech.sampled_buckets(secrets), mech.sampled_buckets(secrets[order])
    else:
        assert isinstance(mech, LGRR | TwoStageUnary | RAPPOR)
        column = "value" if isinstance(mech, LGRR) else "bits"
        first = mech.permanent_response(values, secrets)[column]
        again = mech.permanent_response(values[order], secrets[order])[column]
    np.testing.assert_array_equal(first[order], again)


@pytest.mark.parametrize("cls", TWO_STAGE)
def test_permanent_responses_follow_stage_one_and_are_independent_across_values(cls: type[SolvedTwoStage]) -> None:
    """Over devices, the memo of value 0 follows stage 1 (chi-square), and the memos of values 0 and 1 of the same
    device are independent (chi-square of the joint table against the product of its margins)."""
    k, n = 3, 60_000
    oracle = cls(2.0, k, epsilon_first=1.0)
    secrets = draw_secrets(np.random.default_rng(43), n)
    permanent = two_stage_channels(oracle)[0]
    outcome = {}
    for v in (0, 1):
        response = oracle.permanent_response(np.full(n, v), secrets)
        column = response["value"] if isinstance(oracle, LGRR) else response["bits"] @ (1 << np.arange(k - 1, -1, -1))
        outcome[v] = np.asarray(column, dtype=np.int64)
        observed = np.bincount(outcome[v], minlength=permanent.shape[1])
        assert stats.chisquare(observed, permanent[v] * n).pvalue > 1e-4
    table = np.zeros((permanent.shape[1], permanent.shape[1]))
    np.add.at(table, (outcome[0], outcome[1]), 1)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-4


@pytest.mark.parametrize("prob", [0.5, 0.1, 1 / 257, 0.999])
def test_keyed_bits_are_bernoulli(prob: float) -> None:
    n, width = 20_000, 20
    bits, _ = keyed_bits(draw_secrets(np.random.default_rng(47), n), np.arange(n), width, prob)
    rate = bits.mean(axis=0)
    assert np.all(np.abs(rate - prob) <= 4.5 * math.sqrt(prob * (1 - prob) / n))


def test_dbitflip_subsets_are_uniform() -> None:
    mech = DBitFlip(1.0, 6, sampled=3)
    chosen = mech.sampled_buckets(draw_secrets(np.random.default_rng(53), 60_000))
    assert (np.diff(chosen, axis=1) > 0).all()
    codes = (1 << chosen).sum(axis=1)  # the subset as a bit mask
    observed = np.unique(codes, return_counts=True)[1]
    assert observed.size == math.comb(6, 3)
    assert stats.chisquare(observed).pvalue > 1e-4


def test_memoized_windows_stay_unbiased() -> None:
    """Window after window of the same devices (same secrets): each window's estimate is unbiased with the closed-
    form variance, as every row of a window is a distinct device; the windows are correlated, not biased."""
    oracle = LOSUE(3.0, K, epsilon_first=1.0)
    rng = np.random.default_rng(59)
    n, windows = 50_000, 20
    values = rng.choice(K, size=n, p=TRUE_FREQS)
    truth = np.bincount(values, minlength=K) / n
    secrets = draw_secrets(rng, n)
    estimates = np.array(
        [oracle.estimate(oracle.accumulate(oracle.perturb(values, rng, secrets=secrets))).value for _ in range(windows)]
    )
    # the mean over windows is still a single draw of the memo: its error is at most that of one window's memo
    # (variance between that of one window and of n * windows fresh reports); 4 one-window standard errors bound it
    one_window = np.sqrt(oracle.variance(truth) / n)
    assert np.all(np.abs(estimates.mean(axis=0) - truth) <= 4 * one_window)
    assert np.all(np.abs(estimates - truth) <= 4.5 * one_window)


def test_secrets_must_match_the_values() -> None:
    oracle = LGRR(2.0, 4)
    with pytest.raises(LDPError):
        oracle.perturb([0, 1], np.random.default_rng(0), secrets=np.array([1, 2, 3], dtype=np.uint64))
    with pytest.raises(LDPError):
        oracle.perturb([0, 1], np.random.default_rng(0), secrets=np.array([1, 2]))  # not uint64


@pytest.mark.parametrize("name", NAMES)
def test_a_single_report_audits_within_its_one_report_budget(name: str) -> None:
    from ldpstream.mechanisms.audit import audit_mechanism

    mech = registry.make(name, 2.0, 6) if registry.takes_domain(name) else registry.make(name, 2.0)
    result = audit_mechanism(mech, seed=61, n=200_000, n_select=40_000)
    assert 0.5 * mech.epsilon <= result.epsilon_lower_bound <= mech.epsilon


@pytest.mark.parametrize("check", [check_unbiased, check_variance], ids=lambda c: c.__name__)
def test_rappor_cohort_term_of_the_variance(check) -> None:
    """Nearly noiseless RAPPOR (f = 0.005, p = 0, q = 1): the variance is almost all m sum_c G_c o G_c - I, the cost
    of the random cohorts, which the contract checks at eps 1 and 4 see only diluted in the noise."""
    case = longitudinal_case("rappor")
    exact = MechanismCase(**{**case.__dict__, "name": "rappor-noiseless",
                             "make": lambda eps: RAPPOR.from_f(K, f=0.005, p=0.0, q=1.0)})
    check(exact, 1.0)


@pytest.mark.parametrize(("buckets", "valid"), [([[1, 5], [0, 2]], True), ([[3, 3], [0, 2]], False),
                                                ([[1, 5], [2, 0]], False)])
def test_dbitflip_takes_only_distinct_ascending_buckets_per_report(buckets: list[list[int]], valid: bool) -> None:
    """Within a report the buckets ascend strictly; from one report to the next anything goes."""
    mech = DBitFlip(1.0, 6, sampled=2)
    reports = {"buckets": np.array(buckets, dtype=np.uint32), "bits": np.ones((2, 2), dtype=np.uint8)}
    if valid:
        assert mech.accumulate(reports)[-1] == pytest.approx(2.0)
    else:
        with pytest.raises(LDPError, match="ascending"):
            mech.accumulate(reports)


@pytest.mark.parametrize(("p_set", "p_clear"), [(0.75, 0.25), (1.0, 0.0), (0.2, 0.9), (1 / 257, 0.999)])
def test_instantaneous_bits_follow_their_two_probabilities(p_set: float, p_clear: float) -> None:
    """Set bits report 1 with p_set, clear ones with p_clear, whichever is larger (the uint8 threshold wraps)."""
    n, width = 20_000, 16
    rng = np.random.default_rng(59)
    permanent = rng.random((n, width)) < 0.5
    out = instantaneous_bits(permanent, p_set, p_clear, rng)
    for mask, prob in ((permanent, p_set), (~permanent, p_clear)):
        count = mask.sum()
        assert abs(out[mask].mean() - prob) <= 4.5 * math.sqrt(prob * (1 - prob) / count) + 1e-12


def test_keyed_words_of_one_secret_and_key_are_those_of_a_batch() -> None:
    """0-d inputs (one device, one key) give the same words as the same entries of a batch."""
    batch = keyed_words(np.array([5, 6], dtype=np.uint64), 0x51, np.array([3, 4]))
    single = keyed_words(np.uint64(6), 0x51, 4)
    assert int(single) == int(batch[1])
    np.testing.assert_array_equal(keyed_words(np.uint64(5), 0x51, np.array([3, 4]))[:1], batch[:1])
