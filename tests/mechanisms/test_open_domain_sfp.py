"""Apple's sequence fragment puzzle (`ldpstream.mechanisms.open_domain.sfp`): exact eps-LDP of the two records by
enumeration, the word sketch's estimate of a named string unbiased with the closed-form variance given the hashes, the
contract
checks that apply to a decoded top list, the auditor, recall on a Zipf population, and hostile input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpstream.mechanisms.audit import audit_mechanism
from ldpstream.mechanisms.base import LDPError, Mechanism, Reports
from ldpstream.mechanisms.open_domain import SFP, HashedGRR, StringDomain
from tests.mechanisms.checks import (
    EPSILONS,
    MechanismCase,
    Z,
    check_bad_input,
    check_determinism,
    check_merge,
    check_schema,
    check_variance,
)
from tests.mechanisms.test_open_domain import BAD_VALUES, DOMAIN, WORDS, _all_strings, _every_report, _gamma, _words


def _sfp(eps: float) -> SFP:
    return SFP(eps, DOMAIN, seed=11, top=4)


def sfp_case() -> MechanismCase:
    """Per device, the word sketch's term for each named word: conditional expectation m/(m-1) (gamma - 1/m)
    given the hashes (1 on its own word), variance (m/(m-1))^2 V(gamma) (ldpstream.mechanisms.open_domain.sketch)."""

    def expected(mech: Mechanism, values: np.ndarray) -> np.ndarray:
        assert isinstance(mech, SFP)
        m = mech.word.width
        return m / (m - 1) * (_gamma(mech.word, values) - 1 / m)

    def contributions(mech: Mechanism, reports: Reports) -> np.ndarray:
        assert isinstance(mech, SFP)
        return mech.user_terms(reports, DOMAIN.encode(WORDS))

    def variance(mech: Mechanism, values: np.ndarray) -> np.ndarray:
        assert isinstance(mech, SFP)
        gamma = _gamma(mech.word, values)
        return (mech.word.width / (mech.word.width - 1)) ** 2 * mech.word.z_variance(gamma, gamma**2)

    return MechanismCase("sfp", _sfp, _words, expected, contributions, variance, bad_values=BAD_VALUES)


@pytest.mark.parametrize("eps", EPSILONS)
def test_contract_and_the_variance_of_a_named_string(eps: float) -> None:
    case = sfp_case()
    for check in (check_schema, check_determinism, check_variance, check_merge, check_bad_input):
        check(case, eps)


@pytest.mark.parametrize("eps", EPSILONS)
def test_a_named_string_is_estimated_without_bias(eps: float) -> None:
    """frequencies() is the mean of the per-device terms, within Z closed-form standard errors of its estimand."""
    case = sfp_case()
    rng = np.random.default_rng(5)
    mech = _sfp(eps)
    values = _words(rng, case.n)
    reports = mech.perturb(values, rng)
    est = mech.frequencies(mech.accumulate(reports), WORDS)
    np.testing.assert_allclose(est.value, case.contributions(mech, reports).mean(axis=0), rtol=1e-9, atol=1e-12)
    truth = case.expected(mech, values).mean(axis=0)
    stderr = np.sqrt(case.variance(mech, values).mean(axis=0) / case.n)
    z = np.abs(est.value - truth) / stderr
    assert np.all(z <= Z), z
    # the stderr shown is the formula's at the estimate, averaged over the hashes' draw: close to the exact one
    np.testing.assert_allclose(est.stderr, stderr, rtol=0.25)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_exact_epsilon_by_enumerating_every_report(eps: float) -> None:
    """Each record is randomized response at eps / 2; together (sequential composition) exactly eps."""
    domain = StringDomain(2, "ab")
    mech = SFP(eps, domain, step=1, hashes=2, seed=2)
    assert mech.positions == (0, 1) and mech.word.epsilon == mech.fragments[0].epsilon == eps / 2
    reports = _every_report(mech)
    log_p = mech.log_pmf(reports, _all_strings(domain))
    np.testing.assert_allclose(np.exp(log_p).sum(axis=0), 1.0, rtol=1e-9)  # a distribution for every string
    loss = log_p.max(axis=1) - log_p.min(axis=1)
    assert loss.max() <= eps + 1e-9
    assert loss.max() >= eps - 1e-9  # tight: some report tells two strings apart in both records
    one = HashedGRR(eps / 2, domain, hashes=2, seed=2)  # a single record spends only half the budget
    single = one.log_pmf(_every_report(one), _all_strings(domain))
    assert (single.max(axis=1) - single.min(axis=1)).max() <= eps / 2 + 1e-9


def test_the_auditor_finds_no_violation() -> None:
    mech = SFP(1.0, StringDomain(4, "abcd"), seed=3)
    result = audit_mechanism(mech, seed=2, n=200_000, n_select=50_000)
    assert result.epsilon_lower_bound <= 1.0
    assert result.epsilon_lower_bound > 0.8  # the auditor sees most of the budget: its events are telling


def test_hostile_statistics_raise() -> None:
    mech = _sfp(2.0)
    stats = mech.accumulate(mech.perturb(_words(np.random.default_rng(0), 3000), np.random.default_rng(1)))
    nan = stats.copy()
    nan[3] = np.nan
    fewer = stats.copy()
    fewer[mech.fragments[0].stats_size - 1] -= 1  # the first position's n: fragments and words disagree
    fraction = stats.copy()
    fraction[-1] += 0.5
    for bad, reason in ((stats[:-1], "shape"), (nan, "finite"), (fewer, "fragment reports"), (fraction, "count"),
                        (np.array(["x"] * stats.shape[0]), "numbers")):
        with pytest.raises(LDPError, match=reason):
            mech.heavy_hitters(bad)
    with pytest.raises(LDPError, match="top"):
        mech.heavy_hitters(stats, top=0)


def test_hostile_reports_raise() -> None:
    mech = _sfp(2.0)
    reports = mech.perturb(_words(np.random.default_rng(0), 100), np.random.default_rng(1))
    for name, value, reason in (("position", len(mech.positions), "outside"),
                                ("word_y", mech.word.width, "outside"),
                                ("fragment_hash", mech.fragments[0].hashes, "outside")):
        bad = {k: v.copy() for k, v in reports.items()}
        bad[name][0] = value
        with pytest.raises(LDPError, match=reason):
            mech.accumulate(bad)
        assert mech.schema.violations(bad)[0] != ""  # the aggregator's per-row filter dead-letters it
    with pytest.raises(LDPError, match="columns"):
        mech.accumulate({k: v for k, v in reports.items() if k != "word_hash"})
    with pytest.raises(LDPError, match="dtype"):
        mech.accumulate({**reports, "position": reports["position"].astype(np.float64)})


def test_bad_parameters_raise() -> None:
    for kwargs, reason in (({"step": 0}, "step"), ({"step": 7}, "step"), ({"top": 0}, "top"),
                           ({"beam": True}, "beam"), ({"step": 5}, "records")):
        with pytest.raises(LDPError, match=reason):
            SFP(2.0, DOMAIN, **kwargs)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="ab", min_size=1, max_size=3), min_size=1, max_size=60), st.integers(1, 20))
def test_decoding_any_population_gives_distinct_strings_of_the_domain(words: list[str], top: int) -> None:
    domain = StringDomain(3, "ab")
    sfp = SFP(1.0, domain, top=top, seed=1)
    found = sfp.heavy_hitters(sfp.accumulate(sfp.perturb(words, np.random.default_rng(len(words)))))
    assert len(found.items) == len(set(found.items)) <= top
    assert domain.encode(list(found.items)).shape == (len(found.items), 3)  # every one a valid string
    assert np.all(np.isfinite(found.value)) and np.all(found.stderr > 0)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_accumulate_takes_any_integer_reports_without_crashing(data: st.DataObject) -> None:
    """Random integer columns, in and out of the declared ranges: statistics or LDPError, nothing else."""
    mech = SFP(1.0, StringDomain(3, "ab"), seed=1)
    n = data.draw(st.integers(0, 20))
    reports = {c.name: np.array(data.draw(st.lists(st.integers(0, int(c.high) + 2), min_size=n, max_size=n)),
                                dtype=np.int64) for c in mech.schema.columns}
    try:
        stats = mech.accumulate(reports)
    except LDPError:
        assert (mech.schema.violations(reports) != "").any()
        return
    assert stats.shape == (mech.stats_size,) and math.isclose(stats[-1], n)
    mech.heavy_hitters(stats)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_decoding_any_statistics_gives_strings_of_the_domain_or_an_error(data: st.DataObject) -> None:
    """Forged statistics (any finite sums, counts that agree or not): distinct valid strings, or LDPError."""
    domain = StringDomain(3, "ab")
    mech = SFP(1.0, domain, seed=1, top=5)
    scale = 10.0 ** data.draw(st.integers(-3, 12))  # the sums: noise of any size from a drawn seed (thousands)
    stats = np.random.default_rng(data.draw(st.integers(0, 2**32))).standard_cauchy(mech.stats_size) * scale
    counts = data.draw(st.lists(st.integers(0, 1000), min_size=len(mech.positions), max_size=len(mech.positions)))
    ends = np.cumsum([o.stats_size for o in (*mech.fragments, mech.word)]) - 1
    stats[ends] = [*counts, sum(counts) + data.draw(st.sampled_from([0, 0, 1]))]
    try:
        found = mech.heavy_hitters(stats)
    except LDPError:
        assert stats[-1] != sum(counts)
        return
    assert len(found.items) == len(set(found.items)) <= 5
    assert domain.encode(list(found.items)).shape == (len(found.items), 3)
