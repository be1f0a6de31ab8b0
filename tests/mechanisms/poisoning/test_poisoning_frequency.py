"""Poisoning detectors of frequency oracles: honest windows of any shape keep (almost) every report, the published
attacks are set aside, the bounds they state hold.

Tolerances come from the stated false-positive rates: a per-report test flags an honest report with probability at
most alpha_report, so over n honest reports at most n alpha + 4 sqrt(n alpha) are flagged but with probability
< 1e-4 (Chernoff); the tests on sums flag an honest window with probability at most alpha_window. Every simulation
is seeded."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.frequency.local_hash import OLH
from ldpstream.mechanisms.frequency.unary import OUE
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.poisoning.attribute import defend
from ldpstream.mechanisms.poisoning.base import CLEAN, SUSPECTED, TOO_FEW, PoisoningError, Policy
from ldpstream.mechanisms.poisoning.frequency import (
    excess_claims,
    hash_tail,
    heavy_buckets,
    item_bounds,
    support_itemsets,
    unary_tail,
)
from ldpstream.simulator.poisoning import Adaptive, fake_frequency_reports
from ldpstream.simulator.population import zipf_probabilities

POLICY = Policy()
D = 64
N = 20_000


def honest_values(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "zipf2":  # heavy Zipf
        return rng.choice(D, size=n, p=zipf_probabilities(D, 2.0))
    if shape == "one_value":  # every device on one value
        return np.full(n, 3)
    return rng.integers(0, D, size=n)


def block_of(oracle: FrequencyOracle, reports: dict[str, np.ndarray]) -> np.ndarray:
    return attribute_block(len(next(iter(reports.values()))), oracle.accumulate(reports))


def per_report_limit(n: int, alpha: float) -> float:
    return n * alpha + 4 * math.sqrt(n * alpha)


@pytest.mark.parametrize("shape", ["zipf2", "one_value", "uniform"])
@pytest.mark.parametrize("name,eps", [("grr", 1.0), ("grr", 4.0), ("oue", 1.0), ("oue", 4.0), ("olh", 1.0),
                                      ("olh", 4.0)])
def test_honest_windows_of_any_shape_set_aside_at_most_the_stated_rate(name: str, eps: float, shape: str) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{name} {eps} {shape}".encode()))
    oracle = registry.make(name, eps, domain=D)
    reference = block_of(oracle, oracle.perturb(honest_values(shape, 4 * N, rng), rng))
    reports = oracle.perturb(honest_values(shape, N, rng), rng)
    defence = defend(oracle, block_of(oracle, reports), reference, reports=reports, policy=POLICY)
    assert defence.set_aside <= per_report_limit(N, POLICY.alpha_report), defence.findings
    # no test on the sums suspects an honest stationary window (probability <= alpha_window)
    assert all(f.status != SUSPECTED for f in defence.findings if f.detector == "excess_claims"), defence.findings


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_a_window_with_too_few_reports_says_so_and_sets_nothing_aside(name: str) -> None:
    rng = np.random.default_rng(5)
    oracle = registry.make(name, 2.0, domain=D)
    reports = fake_frequency_reports(oracle, "maximal_gain", [1, 2, 3], POLICY.min_reports - 1, rng)
    defence = defend(oracle, block_of(oracle, reports), None, reports=reports, policy=POLICY)
    assert {f.status for f in defence.findings} <= {TOO_FEW, "untested"}
    assert TOO_FEW in {f.status for f in defence.findings}
    assert defence.set_aside == 0 and not defence.removed.any()


@pytest.mark.parametrize("name,eps", [("grr", 1.0), ("grr", 4.0), ("oue", 1.0), ("oue", 4.0), ("olh", 1.0),
                                      ("olh", 4.0)])
def test_maximal_gain_keeps_at_most_the_bound_the_detector_states(name: str, eps: float) -> None:
    """5% fakes promoting 10 targets: the defended gain is at most the sum of the targets' allowances over the
    reference (what `item_bounds` promises) plus 4 standard errors of the defended estimate's noise."""
    rng = np.random.default_rng(11)
    d, n, m = 128, 100_000, 5_000
    oracle = registry.make(name, eps, domain=d)
    probs = zipf_probabilities(d, 1.0)
    targets = np.array([9, 17, 33, 40, 58, 77, 90, 101, 113, 120])
    reference = block_of(oracle, oracle.perturb(rng.choice(d, size=4 * n, p=probs), rng))
    genuine = oracle.perturb(rng.choice(d, size=n - m, p=probs), rng)
    fakes = fake_frequency_reports(oracle, "maximal_gain", targets, m, rng)
    attacked = {k: np.concatenate([genuine[k], fakes[k].astype(genuine[k].dtype)]) for k in genuine}
    clean_est = oracle.estimate(oracle.accumulate(genuine))
    block = block_of(oracle, attacked)
    defence = defend(oracle, block, reference, reports=attacked, policy=POLICY)
    assert defence.status == SUSPECTED
    defended = oracle.estimate((block - defence.removed)[1:])
    raw = oracle.estimate(block[1:])
    gain_none = float((raw.value - clean_est.value)[targets].sum())
    gain_ours = float((defended.value - clean_est.value)[targets].sum())
    bound, base = item_bounds(oracle, raw, oracle.estimate(reference[1:]), POLICY)
    noise = 4 * math.sqrt(float((clean_est.stderr[targets] ** 2).sum()) * 2)
    assert gain_ours <= float((bound - base)[targets].sum()) + noise, (gain_none, gain_ours)
    assert gain_ours < 0.5 * gain_none
    flagged = np.zeros(n, dtype=bool)
    for f in defence.findings:
        if f.flagged is not None:
            flagged |= f.flagged
    assert flagged[: n - m].sum() <= per_report_limit(n - m, POLICY.alpha_report)
    if isinstance(oracle, OUE):  # every MGA fake supports all 10 targets: the itemset test takes them all
        assert flagged[n - m:].all()


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_adaptive_fakes_that_mimic_the_population_move_no_item(name: str) -> None:
    """Adaptive fakes with no rise to make and `mimic` set report like the population: every item's estimate from
    them alone is its population frequency within 5 standard errors (Bonferroni over the 64 items: 4e-5 a run);
    without `mimic` the non-targets are uniform, and the top item (0.21 of Zipf(1) over 64) is far below its share."""
    rng = np.random.default_rng(5)
    oracle, m = registry.make(name, 4.0, domain=D), 100_000
    probs = zipf_probabilities(D, 1.0)
    targets = np.array([50, 60])
    mimicking = oracle.estimate(oracle.accumulate(
        fake_frequency_reports(oracle, "adaptive", targets, m, rng, Adaptive(None, 0.0, m, probs))))
    assert np.all(np.abs(mimicking.value - probs) <= 5 * mimicking.stderr)
    uniform = oracle.estimate(oracle.accumulate(
        fake_frequency_reports(oracle, "adaptive", targets, m, rng, Adaptive(None, 0.0, m))))
    assert uniform.value[0] < probs[0] - 10 * uniform.stderr[0]


def test_excess_claims_brings_each_suspect_back_to_its_reference() -> None:
    """A suspect goes back to its reference frequency, not to its bound: a detected attacker keeps nothing of it (at
    the bound, its targets stayed above the genuine items in the defended top list); the reports set aside are then
    the fakes, within 4 standard deviations of the genuine counts' noise (the window's binomial counts of the two
    items, and the reference's, a quarter of that variance, scaled to the window)."""
    rng = np.random.default_rng(2)
    oracle = registry.make("grr", 2.0, domain=D)
    n, m = 50_000, 2_500
    reference = oracle.estimate(oracle.accumulate(oracle.perturb(rng.integers(0, D, size=4 * n), rng)))
    reports = oracle.perturb(rng.integers(0, D, size=n - m), rng)
    stats = oracle.accumulate(reports) + oracle.accumulate(fake_frequency_reports(oracle, "maximal_gain", [5, 9], m,
                                                                                  rng))
    finding = excess_claims(oracle, stats, reference, POLICY)
    assert finding.status == SUSPECTED and set(finding.suspects) == {5, 9}
    assert finding.removed is not None
    bound, base = item_bounds(oracle, oracle.estimate(stats), reference, POLICY)
    after = oracle.estimate(stats - finding.removed).value
    # exact but for X rounded up to whole reports: each item moves by at most 1 / (n (p - q)) per report rounded
    assert np.allclose(after[[5, 9]], base[[5, 9]], atol=2 / (n * (oracle.p - oracle.q)))
    assert np.all(after[[5, 9]] < bound[[5, 9]])
    pi = oracle.q + (oracle.p - oracle.q) * base[[5, 9]]
    sd = math.sqrt(float(np.sum(n * pi * (1 - pi))) * (1 + 1 / 4)) / (1 - float(pi.sum()))
    assert abs(finding.set_aside - m) <= 4 * sd


def test_without_a_reference_only_the_impossible_is_suspected() -> None:
    rng = np.random.default_rng(3)
    oracle = registry.make("grr", 1.0, domain=1024)  # a target's fakes push it far above 1
    n, m = 50_000, 2_500
    stats = (oracle.accumulate(oracle.perturb(rng.integers(0, 1024, size=n - m), rng))
             + oracle.accumulate(fake_frequency_reports(oracle, "maximal_gain", [7], m, rng)))
    finding = excess_claims(oracle, stats, None, POLICY)
    assert finding.status == SUSPECTED and finding.suspects == (7,)
    assert math.isinf(finding.bound)  # no reference: no bound on what an attacker keeps below 1


def test_itemsets_are_untested_for_single_support_reports() -> None:
    oracle = registry.make("grr", 1.0, domain=D)
    reports = oracle.perturb(np.zeros(2000, dtype=int), np.random.default_rng(0))
    assert support_itemsets(oracle, reports).status == "untested"


def test_unary_tail_bounds_honest_reports_whose_value_is_in_the_set() -> None:
    rng = np.random.default_rng(4)
    oracle = OUE(1.0, D)
    items = np.arange(8)
    reports = oracle.perturb(np.zeros(200_000, dtype=int), rng)  # the worst case: every value in S
    hits = np.asarray(reports["bits"])[:, items].sum(axis=1)
    for t in range(2, 8):
        tail = unary_tail(oracle.p, oracle.q, len(items), t)
        observed = float((hits >= t).mean())
        assert abs(observed - tail) <= 4 * math.sqrt(tail * (1 - tail) / len(hits)) + 1e-6, (t, observed, tail)


@pytest.mark.parametrize("own", [0, 100])
def test_the_hash_bound_holds_for_structured_sets(own: int) -> None:
    """An arithmetic progression is the worst set for the linear hash family (its items collide together far more
    than 1/g^2); the Monte Carlo bound over the actual family still bounds honest reports, in or out of the set."""
    rng = np.random.default_rng(6)
    oracle = OLH(1.0, 128)
    items = np.arange(8)
    bound = hash_tail(oracle, items, alpha=0.0)
    reports = oracle.perturb(np.full(200_000, own), rng)
    supported = (np.asarray(reports["y"])[:, None].astype(np.int64) ==
                 ((np.asarray(reports["a"], dtype=np.int64)[:, None] * items[None, :]
                   + np.asarray(reports["b"], dtype=np.int64)[:, None]) % ((1 << 24) - 3)) * oracle.g
                 // ((1 << 24) - 3)).sum(axis=1)
    for t in range(2, len(bound)):
        observed = float((supported >= t).mean())
        assert observed <= bound[t] + 4 * math.sqrt(max(bound[t], 1e-6) / len(supported)), (t, observed, bound[t])


def test_heavy_buckets_counts_the_buckets_holding_at_least_t() -> None:
    got = heavy_buckets(np.array([[3, 1, 3, 3, 2], [0, 0, 1, 1, 5]]))
    assert got.tolist() == [[3, 3, 1, 1, 0, 0], [3, 3, 2, 0, 0, 0]]


@pytest.mark.parametrize("field,value", [("alpha_report", 0.0), ("alpha_window", 1.5), ("drift", -0.1),
                                         ("min_reports", 0), ("candidates", 1), ("alert_fraction", 2)])
def test_a_policy_out_of_range_is_refused(field: str, value: float) -> None:
    with pytest.raises(PoisoningError, match=field):
        Policy(**{field: value})


def test_a_reference_too_small_to_use_is_ignored() -> None:
    oracle = registry.make("oue", 2.0, domain=D)
    rng = np.random.default_rng(8)
    stats = oracle.accumulate(oracle.perturb(rng.integers(0, D, size=5000), rng))
    tiny = Estimate(n=10, value=np.zeros(D), stderr=np.ones(D))
    finding = excess_claims(oracle, stats, tiny, POLICY)
    assert finding.status == CLEAN and math.isinf(finding.bound)
