"""Open-domain oracles and heavy-hitter trees: the contract checks with fixed hashes (exact conditional
expectation and variance), unbiasedness and the collision variance over random hashes, exact epsilon by
enumerating every report of small sketches, the auditor, and heavy hitters of a Zipf population."""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.audit import audit_mechanism
from ldpstream.mechanisms.base import LDPError, Mechanism
from ldpstream.mechanisms.open_domain import CMS, HCMS, PEM, HashedGRR, HCMSTree, PrefixTree, SketchOracle, StringDomain
from ldpstream.mechanisms.open_domain.sfp import SFP
from ldpstream.mechanisms.open_domain.strings import prefix_fingerprints
from ldpstream.mechanisms.open_domain.tree import PEEL_ROUNDS, peeled_estimates
from ldpstream.simulator.strings import zipf_words
from tests.mechanisms.checks import EPSILONS, MechanismCase, Z, check_bad_input, check_determinism, check_merge, run_all

DOMAIN = StringDomain(6, "abcdef")
WORDS = np.array(["abc", "fed", "a", "bcdefa", "dd", "eeeee", "cab", "f"])
WEIGHTS = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.06, 0.05, 0.04])
SKETCHES = {
    "cms": lambda eps, seed=11: CMS(eps, DOMAIN, hashes=16, width=64, seed=seed, dictionary=WORDS.tolist()),
    "hcms": lambda eps, seed=11: HCMS(eps, DOMAIN, hashes=16, width=64, seed=seed, dictionary=WORDS.tolist()),
    "hashed_grr": lambda eps, seed=11: HashedGRR(eps, DOMAIN, seed=seed, dictionary=WORDS.tolist()),
}
SMALL_SKETCHES = {
    "cms": lambda eps, seed: CMS(eps, DOMAIN, hashes=4, width=16, seed=seed, dictionary=WORDS.tolist()),
    "hcms": lambda eps, seed: HCMS(eps, DOMAIN, hashes=4, width=16, seed=seed, dictionary=WORDS.tolist()),
    "hashed_grr": lambda eps, seed: HashedGRR(eps, DOMAIN, hashes=4, width=16, seed=seed, dictionary=WORDS.tolist()),
}
TREES = {"hcms_tree": HCMSTree, "pem": PEM}
NAMES = (*SKETCHES, *TREES)
BAD_VALUES = (["abcdefa"], ["abz"], [""], ["ab\x00"], [3], np.zeros((2, 2)))


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice(WORDS, size=n, p=WEIGHTS)


def _gamma(mech: SketchOracle, values: np.ndarray) -> np.ndarray:
    """(n, D) gamma(d_u, d) for each device's word against each dictionary word."""
    pair = mech.collision_fractions(DOMAIN.encode(WORDS), DOMAIN.encode(WORDS))
    order = np.argsort(WORDS)
    return pair[order[np.searchsorted(WORDS[order], values)]]


def sketch_case(name: str) -> MechanismCase:
    """The contract on a fixed-hash sketch: the estimand is each device's conditional expectation given the
    hashes, m/(m-1) (gamma(d_u, d) - 1/m) (1 on its own word), its variance (m/(m-1))^2 V(gamma)."""

    def expected(mech: Mechanism, values: np.ndarray) -> np.ndarray:
        assert isinstance(mech, SketchOracle)
        m = mech.width
        return m / (m - 1) * (_gamma(mech, values) - 1 / m)

    def contributions(mech: Mechanism, reports: dict[str, np.ndarray]) -> np.ndarray:
        assert isinstance(mech, SketchOracle)
        return mech.user_terms(reports, DOMAIN.encode(WORDS))

    def variance(mech: Mechanism, values: np.ndarray) -> np.ndarray:
        assert isinstance(mech, SketchOracle)
        gamma = _gamma(mech, values)
        return (mech.width / (mech.width - 1)) ** 2 * mech.z_variance(gamma, gamma**2)

    return MechanismCase(name, lambda eps: SKETCHES[name](eps), _words, expected, contributions, variance,
                         bad_values=BAD_VALUES)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("name", list(SKETCHES))
def test_sketch_contract_with_fixed_hashes(name: str, eps: float) -> None:
    run_all(sketch_case(name), eps)


def test_fixed_hashes_are_biased_by_collisions_by_the_formula() -> None:
    """With fixed hashes E[f_hat] = f + m/(m-1) sum f(d') (gamma - 1/m): measured on words that collide."""
    mech = HCMS(4.0, DOMAIN, hashes=2, width=4, seed=5, dictionary=WORDS.tolist())
    rows = DOMAIN.encode(WORDS)
    gamma = mech.collision_fractions(rows, rows)
    bias = 4 / 3 * ((gamma - 1 / 4) * WEIGHTS[:, None]).sum(axis=0) - 4 / 3 * WEIGHTS * (1 - 1 / 4)
    assert np.abs(bias).max() > 0.05  # a tiny sketch: collisions matter
    n = 400_000
    rng = np.random.default_rng(3)
    values = np.repeat(WORDS, np.round(WEIGHTS * n).astype(int))
    est = mech.estimate(mech.accumulate(mech.perturb(values, rng)))
    f = np.round(WEIGHTS * n) / values.shape[0]
    z = np.abs(est.value - f - bias) / est.stderr
    assert np.all(z <= Z), z
    assert np.any(np.abs(est.value - f) / est.stderr > Z)  # the bias, not noise, is what the formula removes


@pytest.mark.parametrize("name", list(SKETCHES))
def test_unbiased_over_random_hashes_with_the_collision_variance(name: str) -> None:
    """A fresh collection seed per trial: the mean error is 0 and the variance is noise + sum f^2 / ((m-1) k)."""
    trials, n = 400, 3000
    target, f = 1, WEIGHTS[1]
    rng = np.random.default_rng(8)
    values = np.repeat(WORDS, np.round(WEIGHTS * n).astype(int))
    f_true = np.round(WEIGHTS * n) / values.shape[0]
    errors = np.empty(trials)
    for trial in range(trials):  # a small sketch (k m = 64 cells), so that collisions are frequent
        small = SMALL_SKETCHES[name](4.0, 1000 + trial)
        errors[trial] = small.estimate(small.accumulate(small.perturb(values, rng))).value[target] - f_true[target]
    square_mass = float((f_true**2).sum() - f_true[target] ** 2)
    noise = float(small.variance(f)) / values.shape[0]
    predicted = noise + small.collision_variance(square_mass)
    assert small.collision_variance(square_mass) > noise / 4  # the collision term is a visible part
    assert abs(errors.mean()) <= Z * math.sqrt(predicted / trials)
    # the sample variance of `trials` errors has relative sd ~ sqrt((kurtosis - 1) / trials)
    kurtosis = float(((errors - errors.mean()) ** 4).mean() / errors.var() ** 2)
    assert abs(errors.var(ddof=1) / predicted - 1) <= Z * math.sqrt((kurtosis - 1) / trials)


def _all_strings(domain: StringDomain) -> list[str]:
    symbols = [chr(int(c)) for c in domain.symbols]
    return ["".join(p) for length in range(1, domain.max_length + 1) for p in itertools.product(symbols, repeat=length)]


def _every_report(mech: Mechanism) -> dict[str, np.ndarray]:
    """Every report the schema allows (small sketches only)."""
    axes = []
    for col in mech.schema.columns:
        values = list(range(int(col.low), int(col.high) + 1))
        axes.append(list(itertools.product(values, repeat=col.width)) if col.width > 1 else values)
    grid = list(itertools.product(*axes))
    return {col.name: np.array([g[i] for g in grid], dtype=col.dtype) for i, col in enumerate(mech.schema.columns)}


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("make", [
    lambda eps, d: CMS(eps, d, hashes=2, width=4, seed=2),
    lambda eps, d: HCMS(eps, d, hashes=2, width=4, seed=2),
    lambda eps, d: HashedGRR(eps, d, hashes=3, seed=2),
    lambda eps, d: PEM(eps, d, step=1, seed=2),
    lambda eps, d: HCMSTree(eps, d, step=1, seed=2),
], ids=["cms", "hcms", "hashed_grr", "pem", "hcms_tree"])
def test_exact_epsilon_by_enumerating_every_report(make, eps: float) -> None:  # type: ignore[no-untyped-def]
    domain = StringDomain(2, "ab")
    mech = make(eps, domain)
    if isinstance(mech, PrefixTree):  # shrink the trees' sketches to enumerable ones
        mech.oracles = tuple(HashedGRR(eps, domain, hashes=3, seed=t, prefix_length=o.prefix_length)
                             if isinstance(mech, PEM) else HCMS(eps, domain, hashes=2, width=4, seed=t,
                                                                prefix_length=o.prefix_length)
                             for t, o in enumerate(mech.oracles))
    reports = _every_report(mech)
    log_p = mech.log_pmf(reports, _all_strings(domain))
    np.testing.assert_allclose(np.exp(log_p).sum(axis=0), 1.0, rtol=1e-9)  # a distribution for every string
    loss = log_p.max(axis=1) - log_p.min(axis=1)
    assert loss.max() <= eps + 1e-9
    assert loss.max() >= eps - 1e-9  # tight: some report tells two strings apart by exactly e^eps


@pytest.mark.parametrize("name", NAMES)
def test_the_auditor_finds_no_violation(name: str) -> None:
    domain = StringDomain(4, "abcd")
    mech = SKETCHES[name](1.0) if name in SKETCHES else TREES[name](1.0, domain, step=2)
    if isinstance(mech, SketchOracle):
        mech = type(mech)(1.0, domain, hashes=8, width=16, seed=3) if name != "hashed_grr" else HashedGRR(1.0, domain)
    result = audit_mechanism(mech, seed=2, n=200_000, n_select=50_000)
    assert result.epsilon_lower_bound <= 1.0
    assert result.epsilon_lower_bound > 0.8  # the auditor sees most of the budget: its events are telling


def tree_case(name: str) -> MechanismCase:
    """A tree through the checks that do not need per-device estimands (its estimate is a decoded top list)."""
    def not_used(*_: object) -> np.ndarray:
        raise AssertionError("the tree's unbiasedness is tested by test_heavy_hitters_of_a_zipf_population")

    return MechanismCase(name, lambda eps: TREES[name](eps, DOMAIN, seed=4, step=2), _words, not_used, not_used,
                         not_used, bad_values=BAD_VALUES, n=30_000)


@pytest.mark.parametrize("name", list(TREES))
def test_tree_contract(name: str) -> None:
    case = tree_case(name)
    for check in (check_determinism, check_merge, check_bad_input):
        check(case, 2.0)
    mech = case.make(2.0)
    reports = mech.perturb(_words(np.random.default_rng(0), 5000), np.random.default_rng(1))
    assert (mech.schema.violations(reports) == "").all()
    assert np.bincount(reports["level"], minlength=mech.levels).min() > 5000 / mech.levels * 0.9  # partitioned


@pytest.mark.parametrize("seed", range(5))
def test_joint_estimates_remove_the_leaders_collisions_exactly(seed: int) -> None:
    """On a table equal to its expectation given the hashes, every candidate's score is f + its collision bias;
    the leaders' joint estimates are exactly their frequencies, however many peeling rounds ran (each round must
    correct the raw scores, not the previous round's corrected ones)."""
    grr = HashedGRR(2.0, DOMAIN, seed=seed)  # g = 8 buckets: large collision biases, a joint set of all 8 words
    assert PEEL_ROUNDS >= 2
    rows = DOMAIN.encode(WORDS)
    n, cells = 1_000_000, grr.candidate_cells(rows)
    table = np.zeros(grr.hashes * grr.width)
    np.add.at(table, cells, np.repeat(n * WEIGHTS / grr.hashes, grr.hashes).reshape(cells.shape))
    table = table.reshape(grr.hashes, grr.width)
    raw = grr.score(table, n, cells)
    assert np.abs(raw - WEIGHTS).max() > 0.005  # the collisions bias the raw scores
    value, stderr = peeled_estimates(grr, table, n, rows, keep=2)
    np.testing.assert_allclose(value, WEIGHTS, rtol=0, atol=1e-9)
    assert np.all(stderr > 0)


@pytest.mark.parametrize(("name", "eps", "top", "least"), [("pem", 4.0, 20, 0.5), ("pem", 2.0, 10, 0.5),
                                                     ("hcms_tree", 4.0, 10, 0.5), ("sfp", 4.0, 10, 0.4),
                                                     ("sfp", 8.0, 20, 0.7)])
def test_heavy_hitters_of_a_zipf_population(name: str, eps: float, top: int, least: float) -> None:
    """Precision = recall for a top-k list. The decoder must find what its last sketch (a tree's last level, SFP's
    word sketch) could rank with the dictionary of all words given (discovery loses at most one of the top k), and
    the found true words' estimates lie within Z standard errors of their frequencies."""
    n = 400_000
    rng = np.random.default_rng(21)
    pop = zipf_words(5000, 1.1, n, rng, alphabet="abcdefgh", max_length=6)
    domain = StringDomain(6, "abcdefgh")
    tree = {**TREES, "sfp": SFP}[name](eps, domain, seed=9, top=top)
    stats = tree.accumulate(tree.perturb(pop.items(), rng))
    found = tree.heavy_hitters(stats)
    truth = set(pop.top(top))
    recall = len(truth & set(found.items)) / top
    words = np.array([w.decode() for w in pop.words.tolist()])
    ranked = words[np.argsort(-tree.frequencies(stats, words).value, kind="stable")[:top]]
    dictionary_recall = len(truth & set(ranked.tolist())) / top
    print(f"{name} eps={eps} top {top}: precision = recall = {recall:.2f}, with the dictionary {dictionary_recall:.2f}")
    assert recall >= dictionary_recall - 1 / top
    assert recall >= least
    known = np.isin(found.items, list(truth))
    counts = dict(zip(words.tolist(), pop.counts.tolist(), strict=True))
    true_f = np.array([counts[item] for item in np.array(found.items)[known]]) / n
    # the stderr is the noise's; a fixed family adds the collisions with strings outside the joint estimate, at
    # most sum_{d' != d} f(d')^2 / ((m - 1) k) in variance over the hashes (ldpstream.mechanisms.open_domain.sketch)
    square_mass = float(((pop.counts / n) ** 2).sum()) - true_f**2
    last = tree.word if isinstance(tree, SFP) else tree.oracles[-1]
    collisions = last.collision_variance(square_mass)
    z = np.abs(found.value[known] - true_f) / np.sqrt(found.stderr[known] ** 2 + collisions)
    assert np.all(z <= Z), z


def test_string_domain_refuses_bad_strings_with_reasons() -> None:
    for bad, reason in ((["abcdefg"], "longer"), (["abz"], "outside the alphabet"), ([""], "empty"),
                        (["a\x00b"], "NUL"), (["ab\x00"], "NUL"), ([1.5], "strings")):
        with pytest.raises(LDPError, match=reason):
            DOMAIN.encode(bad)
    with pytest.raises(LDPError, match="NUL"):
        StringDomain(4).encode([b"a\x00b"])
    assert StringDomain(8).encode(["é"]).tolist() == [[0xC3, 0xA9, 0, 0, 0, 0, 0, 0]]  # bytes mode: UTF-8


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=10), st.binary(max_size=10)), min_size=1, max_size=5))
def test_encoding_takes_any_input_without_crashing(values: list[object]) -> None:
    for domain in (DOMAIN, StringDomain(6)):
        try:
            rows = domain.encode(np.array(values, dtype=object))
        except LDPError:
            continue
        assert rows.shape == (len(values), 6)
        if all(isinstance(v, str) for v in values):  # text comes back as it went in
            assert domain.encode(domain.decode(rows)).tolist() == rows.tolist()


def test_prefix_fingerprints_see_only_the_prefix() -> None:
    rows = DOMAIN.encode(["abcdef", "abcfff", "abd"])
    three = prefix_fingerprints(rows, 3, seed=1)
    assert three[0] == three[1] != three[2]
    assert len(set(prefix_fingerprints(rows, 6, seed=1).tolist())) == 3
    assert prefix_fingerprints(rows, 3, seed=2)[0] != three[0]


def test_the_registry_lists_what_this_suite_checks() -> None:
    assert {*NAMES, "sfp"} == set(registry.OPEN_DOMAIN)  # sfp: tests/mechanisms/test_open_domain_sfp.py
    for name in registry.OPEN_DOMAIN:
        cls = registry.open_domain_class(name)
        assert cls.name == name
        assert any(t.examples for t in doctest.DocTestFinder(recurse=False).find(cls)), name
    assert set(registry.HEAVY_HITTERS) == {*TREES, "sfp"}
    with pytest.raises(LDPError, match="unknown open-domain"):
        registry.open_domain_class("grr")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet="ab", min_size=1, max_size=3), min_size=1, max_size=60),
       st.sampled_from(list(TREES)), st.integers(1, 20))
def test_decoding_any_population_gives_distinct_strings_of_the_domain(words: list[str], name: str, top: int) -> None:
    domain = StringDomain(3, "ab")
    tree = TREES[name](1.0, domain, step=1, top=top, seed=1)
    found = tree.heavy_hitters(tree.accumulate(tree.perturb(words, np.random.default_rng(len(words)))))
    assert len(found.items) == len(set(found.items)) <= top
    assert domain.encode(list(found.items)).shape == (len(found.items), 3)  # every one a valid string
    assert np.all(np.isfinite(found.value)) and np.all(found.stderr > 0)
