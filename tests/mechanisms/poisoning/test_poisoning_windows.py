"""Fake devices over time: references defended window after window, the sequential test (its false-alarm rate from
Siegmund's run length, an attacker under the per-window bound caught), and demotion found both ways (issue 42)."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.poisoning.attribute import defend, defend_windows, reference_of
from ldpstream.mechanisms.poisoning.base import SUSPECTED, Policy, bonferroni_z
from ldpstream.mechanisms.poisoning.frequency import (
    block_shift,
    excess_claims,
    long_shift,
    lower_bounds,
    window_variance,
)
from ldpstream.mechanisms.poisoning.sequential import (
    BLOCK,
    BLOCK_WINDOWS,
    CUSUM,
    LAG_WINDOWS,
    LONG,
    LONG_ALL_SHARE,
    LONG_LAG,
    LONG_WINDOWS,
    K,
    average_run_length,
    cusum_step,
    threshold,
)
from ldpstream.simulator.poisoning import fake_frequency_reports
from ldpstream.simulator.population import zipf_probabilities

POLICY = Policy()


def honest_block(oracle: FrequencyOracle, n: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An honest window's block, each item's support count from its exact marginal."""
    counts = rng.multinomial(n, probs)
    support = rng.binomial(counts, oracle.p) + rng.binomial(n - counts, oracle.q)
    return attribute_block(n, np.append(support.astype(np.float64), float(n)))


def with_fakes(oracle: FrequencyOracle, block: np.ndarray, attack: str, targets: np.ndarray, m: int,
               rng: np.random.Generator) -> np.ndarray:
    return block + attribute_block(m, oracle.accumulate(fake_frequency_reports(oracle, attack, targets, m, rng)))


def test_the_threshold_gives_siegmunds_run_length_on_honest_steps() -> None:
    """One-sided sums of N(0, 1) steps: the mean run length before a false alarm is ARL0(k, h) (Siegmund's
    approximation, within 5% at h >= 2) within 4 standard errors of the mean of `runs` run lengths (a run length is
    about exponential: its standard deviation is about its mean)."""
    h = threshold(0.05, 4)  # ARL0 = 2 * 4 / 0.05 = 160 windows
    arl = average_run_length(K, h)
    assert abs(arl - 160) < 1e-6 * 160
    rng = np.random.default_rng(3)
    runs, steps = 4000, 3000
    upper, lower = np.zeros(runs), np.zeros(runs)
    first = np.full(runs, np.nan)
    for t in range(steps):
        upper, lower = cusum_step(upper, lower, rng.standard_normal(runs))
        first[np.isnan(first) & (upper > h)] = t + 1
    assert not np.isnan(first).any()  # every run ended well before `steps` (P[run > 3000] ~ exp(-3000 / 160))
    assert abs(first.mean() - arl) <= 4 * arl / math.sqrt(runs) + 0.05 * arl


def test_honest_windows_raise_the_sequential_alarm_at_most_at_the_stated_rate() -> None:
    """The chain of honest windows (references defended, sums carried): alarms begin in at most alpha_sequential
    of the windows (Bonferroni over 2K sums; the steps of consecutive windows share reference windows, negatively
    correlated), within 4 binomial standard deviations; a loose policy so that the rate is measurable."""
    policy = Policy(alpha_sequential=0.02)
    oracle = registry.make("grr", 2.0, domain=32)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(11)
    probs = zipf_probabilities(32, 1.0)
    windows = 1200
    blocks = [honest_block(oracle, 20_000, probs, rng) for _ in range(windows)]
    defences = defend_windows(oracle, blocks, policy=policy)
    onsets, before = 0, set[int]()
    for d in defences[4:]:
        assert d is not None
        now = {v for f in d.findings if f.detector == CUSUM for v in f.suspects}
        onsets += bool(now - before)
        before = now
    expected = policy.alpha_sequential * (windows - 4)
    assert onsets <= expected + 4 * math.sqrt(expected)


def test_a_ramp_is_removed_against_references_defended_window_after_window() -> None:
    """Maximal-gain fakes rising 1% to 10% over ten windows: against the raw sums of the earlier windows the attack
    becomes its own reference; against the defended ones (and the sequential test's anchors) at least 90% of the
    last window's gain is removed."""
    oracle = registry.make("grr", 2.0, domain=64)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(5)
    probs = zipf_probabilities(64, 1.0)
    targets = np.array([40, 50, 60])
    n = 200_000
    honest = [honest_block(oracle, n, probs, rng) for _ in range(14)]
    attacked = honest[:4] + [with_fakes(oracle, b, "maximal_gain", targets, int(0.01 * (t + 1) * n), rng)
                             for t, b in enumerate(honest[4:])]

    def gain(run: list) -> float:  # the targets' defended estimate over the same genuine reports' (last window)
        a, h = run[0][-1], run[1][-1]
        est = [np.asarray(oracle.estimate((block[-1] - d.removed)[1:]).value)[targets].sum()
               for block, d in ((attacked, a), (honest, h))]
        return float(est[0] - est[1])

    none = float(np.asarray(oracle.estimate(attacked[-1][1:]).value)[targets].sum()
                 - np.asarray(oracle.estimate(honest[-1][1:]).value)[targets].sum())
    raw = [[defend(oracle, b, np.sum(blocks[max(0, i - 4):i], axis=0) if i else None, policy=POLICY)
            for i, b in enumerate(blocks)] for blocks in (attacked, honest)]
    ours = [defend_windows(oracle, blocks, policy=POLICY) for blocks in (attacked, honest)]
    assert 1 - gain(ours) / none >= 0.9
    assert gain(raw) > 2 * gain(ours)  # the raw reference keeps far more of it


def test_an_attacker_under_the_per_window_bound_is_caught_by_the_sequential_test() -> None:
    """A target raised 3 standard deviations above its published reference each window (under the per-window bound
    of ~4.4 at K = 64), the reference taking in its earlier windows (they pass the window's own test): the gain
    compounds, the window's test never fires, the sequential test's upper sum grows 2.5 a window and passes h within
    ceil(h / 2.5) + 2 windows (the reference's own noise: +-1 window); the target is then held to its anchor, the
    reference before the drift began."""
    oracle = registry.make("oue", 2.0, domain=64)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(9)
    probs = zipf_probabilities(64, 1.0)
    target = 40
    n = 200_000
    h = threshold(POLICY.alpha_sequential / 2, 64)  # the CUSUM has half the sequential budget
    blocks = [honest_block(oracle, n, probs, rng) for _ in range(4)]
    anchor = float(oracle.estimate(np.sum(blocks, axis=0)[1:]).value[target])
    var = oracle.variance(probs[target]) + probs[target] * (1 - probs[target])
    sd = math.sqrt(var / n + var / (4 * n))
    per_fake = (1 - oracle.q) / (oracle.p - oracle.q) / n  # a fake with the target's bit set raises it by this
    caught = None
    for t in range(12):
        reference = reference_of(blocks, defend_windows(oracle, blocks, policy=POLICY), len(blocks))
        assert reference is not None
        rise = float(oracle.estimate(reference[1:]).value[target]) + 3 * sd - probs[target]
        m = max(0, int(rise / per_fake))
        blocks.append(honest_block(oracle, n, probs, rng) + attribute_block(m, oracle.accumulate(
            fake_frequency_reports(oracle, "maximal_gain", np.array([target]), m, rng))))
        last = defend_windows(oracle, blocks, policy=POLICY)[-1]
        assert last is not None
        if any(f.detector == CUSUM and target in f.suspects for f in last.findings):
            caught = t + 1
            held = float(oracle.estimate((blocks[-1] - last.removed)[1:]).value[target])
            break
    assert caught is not None and caught <= math.ceil(h / (3 - K)) + 2
    assert abs(held - anchor) < 4 * sd  # the anchor is a reference within the drift's first windows: +-4 sd


def test_a_demoted_top_item_is_found_and_given_back_up_to_its_reference() -> None:
    """5% fakes that support none of the top item push OUE's estimate of it far below what an honest window shows;
    the test both ways finds it and gives back its missing supports up to its reference frequency (up to the lower
    bound only, the attacker kept that much)."""
    oracle = registry.make("oue", 1.0, domain=256)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(2)
    probs = zipf_probabilities(256, 1.0)
    n = 200_000
    reference = sum(honest_block(oracle, n, probs, rng) for _ in range(4))
    block = with_fakes(oracle, honest_block(oracle, n, probs, rng), "demotion", np.array([0]), int(0.05 * n), rng)
    ref_est = oracle.estimate(reference[1:])
    finding = excess_claims(oracle, block[1:], ref_est, POLICY)
    assert finding.status == SUSPECTED and 0 in finding.suspects and finding.set_aside == 0
    est = oracle.estimate(block[1:])
    low = lower_bounds(oracle, est, ref_est, POLICY)[0]
    assert float(est.value[0]) < low
    assert finding.removed is not None
    defended = float(oracle.estimate(block[1:] - finding.removed).value[0])
    assert abs(defended - float(ref_est.value[0])) < 1e-9


@pytest.mark.parametrize("name,shape", [("grr", "zipf"), ("oue", "zipf"), ("grr", "one_item")])
def test_the_block_test_flags_honest_blocks_at_most_at_its_stated_rate(name: str, shape: str) -> None:
    """The block test's statistic on honest windows: the latest BLOCK_WINDOWS windows and the LAG_WINDOWS before them
    are two honest samples of the population (a sum of honest windows is an honest window of their reports), so each
    trial is independent and flags any item with probability <= alpha_sequential / 2 (Bonferroni over the K items and
    both sides): the count over `trials` within 4 binomial standard deviations of that; a loose policy so that the
    rate is measurable."""
    policy = Policy(alpha_sequential=0.02)
    oracle = registry.make(name, 2.0, domain=32)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(zlib.crc32(f"block {name} {shape}".encode()))
    probs = zipf_probabilities(32, 1.0) if shape == "zipf" else np.eye(32)[0]
    n, trials = 20_000, 20_000

    def honest(reports: int) -> Estimate:  # `trials` honest windows at once, each item's support from its marginal
        counts = rng.multinomial(reports, probs, size=trials)
        support = rng.binomial(counts, oracle.p) + rng.binomial(reports - counts, oracle.q)
        value = (support / reports - oracle.q) / (oracle.p - oracle.q)
        return Estimate(n=reports, value=value, stderr=np.zeros_like(value))
    flagged = int(block_shift(oracle, honest(BLOCK_WINDOWS * n), honest(LAG_WINDOWS * n), policy).any(axis=1).sum())
    expected = policy.alpha_sequential / 2 * trials
    assert flagged <= expected + 4 * math.sqrt(expected)


def test_a_demotion_the_reference_takes_in_is_found_by_the_block_test() -> None:
    """5% fakes that support none of GRR's top item (d = 1,024, eps = 4) after an honest history: the fall is
    delta = beta (f + q / (p - q)) a window; n is chosen so that the block test sees it, at the attack's fourth
    window (all four latest windows attacked, the lagged ones not), at delta / sd / sqrt(1 / B + 1 / R) >= its z + 4
    standard deviations (the per-window test sees at most 1 / sqrt(1 + 1 / 4) of that per window, and less once the
    reference takes in attacked windows). The block test finds it within the first four attacked windows, and the
    item is held there, so the last window's defended fall is under the undefended one."""
    oracle = registry.make("grr", 4.0, domain=1024)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(12)
    probs = zipf_probabilities(1024, 1.0)
    f, p, q, beta = float(probs[0]), oracle.p, oracle.q, 0.05
    delta = beta * (f + q / (p - q))
    z = bonferroni_z(POLICY.alpha_sequential / 2, 2 * 1024)
    sd_unit = math.sqrt(float(oracle.variance(f)) + f * (1 - f))  # sqrt(n) sd of one window's estimate
    n = math.ceil(((z + 4) * math.sqrt(1 / BLOCK_WINDOWS + 1 / LAG_WINDOWS) * sd_unit / delta) ** 2)
    history = BLOCK_WINDOWS - 1 + LAG_WINDOWS
    genuine = [honest_block(oracle, n, probs, rng) for _ in range(history + 10)]
    m = round(beta * n / (1 - beta))
    attacked = genuine[:history] + [with_fakes(oracle, b, "demotion", np.array([0]), m, rng)
                                    for b in genuine[history:]]
    defences = defend_windows(oracle, attacked, policy=POLICY)
    found = [any(f.detector == BLOCK and 0 in f.suspects for f in d.findings)
             for d in defences[history:] if d is not None]
    assert any(found[:BLOCK_WINDOWS]), found
    last = defences[-1]
    assert last is not None
    defended = float(oracle.estimate((attacked[-1] - last.removed)[1:]).value[0])
    undefended = float(oracle.estimate(attacked[-1][1:]).value[0])
    assert defended > undefended


def honest_estimates(oracle: FrequencyOracle, probs: np.ndarray, reports: int, trials: int,
                     rng: np.random.Generator) -> Estimate:
    """`trials` honest windows of `reports` reports at once (rows), each item's support from its marginal."""
    counts = rng.multinomial(reports, probs, size=trials)
    support = rng.binomial(counts, oracle.p) + rng.binomial(reports - counts, oracle.q)
    value = (support / reports - oracle.q) / (oracle.p - oracle.q)
    return Estimate(n=reports, value=value, stderr=np.zeros_like(value))


@pytest.mark.parametrize("shape", ["zipf", "flat"])
def test_the_long_block_test_flags_honest_blocks_at_its_stated_rate(shape: str) -> None:
    """The long block test on honest windows: the long block and its lagged windows are two honest samples, and its
    demotion part's item is chosen on their pooled estimate, which (normal, equal variances) is independent of their
    difference, so that part flags with probability (1 - LONG_ALL_SHARE) alpha_long (one item: no Bonferroni slack),
    even where the largest item is a toss-up ("flat": choosing it on the lagged windows alone would bias the test
    down); the every-item part adds at most LONG_ALL_SHARE alpha_long (Bonferroni). The count of flagged trials over
    `trials` is at least the first and at most alpha_long, within 4 binomial standard deviations; a loose policy so
    that the rate is measurable."""
    policy = Policy(alpha_long=0.02)
    oracle = registry.make("grr", 2.0, domain=32)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(zlib.crc32(f"long block {shape}".encode()))
    probs = zipf_probabilities(32, 1.0) if shape == "zipf" else np.full(32, 1 / 32)
    n, trials = 2_000, 20_000
    block = honest_estimates(oracle, probs, LONG_WINDOWS * n, trials, rng)
    lagged = honest_estimates(oracle, probs, LONG_LAG * n, trials, rng)
    pooled_value = (block.n * block.value + lagged.n * lagged.value) / (block.n + lagged.n)
    pooled = Estimate(n=block.n + lagged.n, value=pooled_value, stderr=np.zeros_like(pooled_value))
    flagged = int(long_shift(oracle, block, lagged, pooled, policy).any(axis=1).sum())
    low, high = (1 - LONG_ALL_SHARE) * policy.alpha_long * trials, policy.alpha_long * trials
    assert low - 4 * math.sqrt(low) <= flagged <= high + 4 * math.sqrt(high)


def test_the_long_block_test_finds_a_rise_under_every_window_bound() -> None:
    """An item 3 sd of one window's estimate above its level in each of ten windows (under the window's bound of
    5.55 sd, and the block test sees it at 3 / sqrt(1/4 + 1/8) = 4.9 < 5.46 sd) shows in the long block at
    3 / sqrt(1 / 10 + 1 / 48) = 8.6 sd, over the every-item part's 5.46 by more than 3: flagged up."""
    oracle = registry.make("oue", 1.0, domain=1024)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(5)
    probs = zipf_probabilities(1024, 1.0)
    n = 200_000
    f = float(probs[500])
    sd = math.sqrt((float(oracle.variance(f)) + f * (1 - f)) / n)
    block = honest_estimates(oracle, probs, LONG_WINDOWS * n, 1, rng)
    lagged = honest_estimates(oracle, probs, LONG_LAG * n, 1, rng)
    block.value[0, 500] += 3 * sd
    pooled = Estimate(n=1, value=block.value + lagged.value, stderr=block.stderr)
    shift = long_shift(oracle, block, lagged, pooled, POLICY)
    assert shift[0, 500] == 1


def test_a_slow_demotion_of_the_top_item_is_found_and_held_at_its_level() -> None:
    """5% fakes that support none of GRR's top item (d = 1,024, eps = 1: each window's fall, delta = beta (f + q /
    (p - q)), is under every other test's bound) after an honest history of the demotion test's windows; n is chosen
    so that at the attack's tenth window the test sees delta / sd / sqrt(1 / B + 1 / R) >= its z + 4 standard
    deviations. It finds the top item within ten windows, and the last window's defended estimate is held at the
    lagged windows' level: within 4 of one window's standard deviations of the genuine frequency."""
    oracle = registry.make("grr", 1.0, domain=1024)
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(42)
    probs = zipf_probabilities(1024, 1.0)
    f, p, q, beta = float(probs[0]), oracle.p, oracle.q, 0.05
    delta = beta * (f + q / (p - q))
    z = bonferroni_z(POLICY.alpha_long, 1)
    sd_unit = math.sqrt(float(oracle.variance(f)) + f * (1 - f))  # sqrt(n) sd of one window's estimate
    n = math.ceil(((z + 4) * math.sqrt(1 / LONG_WINDOWS + 1 / LONG_LAG) * sd_unit / delta) ** 2)
    history = LONG_WINDOWS - 1 + LONG_LAG
    genuine = [honest_block(oracle, n, probs, rng) for _ in range(history + 10)]
    m = round(beta * n / (1 - beta))
    attacked = genuine[:history] + [with_fakes(oracle, b, "demotion", np.array([0]), m, rng)
                                    for b in genuine[history:]]
    defences = defend_windows(oracle, attacked, policy=POLICY)
    found = [any(f.detector == LONG and 0 in f.suspects for f in d.findings)
             for d in defences[history:] if d is not None]
    assert any(found), found
    last = defences[-1]
    assert last is not None
    defended = float(oracle.estimate((attacked[-1] - last.removed)[1:]).value[0])
    assert abs(defended - f) < 4 * sd_unit / math.sqrt(n)


def test_a_window_the_block_test_holds_stays_held_while_it_is_in_the_recent_block() -> None:
    """GRR over K = 16 equally frequent items (eps = 1), noise-free windows (each support count at its expectation,
    so every statistic below is exact), BLOCK_WINDOWS - 1 + LAG_WINDOWS honest windows, then eight in which fakes
    raise item 0 by Delta = 4 sd of one window's estimate: 4 / sqrt(1 + 1/4) = 3.6 sd over the window's reference,
    under its bound (4.09 at K = 16), every window. At the third the block test sees three attacked windows of the
    four: y = (3 x 4 / 4) / sqrt(1/4 + 1/8) = 4.9 over its 4.66 (alpha_sequential / 2 over 2K), and holds the item.
    The recent windows enter the block raw (`blocks_of`), so from then on it sees four attacked windows of four, over
    lagged windows that hold at most the two it missed (2 x 4 / 8 = 1 sd): y >= (4 - 1) / sqrt(3/8) = 4.9, and it
    holds the item in every window after. Were the held windows in the block defended, the block at the fifth would
    see two attacked windows (the second and this one): y = 2 / sqrt(3/8) = 3.3, and let the attacker go."""
    oracle = registry.make("grr", 1.0, domain=16)
    assert isinstance(oracle, FrequencyOracle)
    n, delta = 100_000, 4.0
    f = np.full(16, 1 / 16)
    pi = oracle.q + (oracle.p - oracle.q) * f  # a report's probability of supporting each item
    honest = attribute_block(n, np.append(n * pi, float(n)))
    raised = oracle.q + (oracle.p - oracle.q) * (f[0] + delta * math.sqrt(float(window_variance(oracle, f)[0]) / n))
    m = round(n * (raised - pi[0]) / (1 - raised))  # fakes naming item 0: (n pi + m) / (n + m) = raised
    fakes = np.zeros(17)
    fakes[0] = fakes[-1] = m
    history = BLOCK_WINDOWS - 1 + LAG_WINDOWS
    defences = defend_windows(oracle, [honest] * history + [honest + attribute_block(m, fakes)] * 8, policy=POLICY)
    found = [{f.detector for f in d.findings if f.status == SUSPECTED} for d in defences[history:] if d is not None]
    assert [BLOCK in kinds for kinds in found] == [False, False] + [True] * 6, found
    assert all(d is not None and d.removed[1] > 0 for d in defences[history + 2:])
