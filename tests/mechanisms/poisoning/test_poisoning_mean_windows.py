"""A numeric mean over windows (issue 42): the block and long block tests on the one statistic, their false alarms on
honest blocks at the stated rates, and an attacker who paces its rise under the window's bound and the CUSUM's drift
found and held at the lagged windows' mean."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.poisoning.attribute import block_test, defend_windows, long_block_test
from ldpstream.mechanisms.poisoning.base import SUSPECTED, Finding, Policy, bonferroni_z
from ldpstream.mechanisms.poisoning.numeric import MEAN, standardized_shift
from ldpstream.mechanisms.poisoning.sequential import BLOCK, CUSUM, LONG, LONG_LAG, LONG_WINDOWS
from ldpstream.simulator.poisoning import fake_numeric_reports
from ldpstream.simulator.population import truncated_gaussian

POLICY = Policy()
TRIALS = 4_000  # independent honest trials (each test's calls cost about a millisecond)
RECENT, LAGGED = 200, 400  # reports of the latest windows and of the lagged ones in an honest trial
REFERENCE = 4  # windows in a window's reference (`defend_windows`' default)


def pm() -> NumericMechanism:
    mech = registry.make("pm", 1.0)
    assert isinstance(mech, NumericMechanism)
    return mech


@cache
def honest_trials(shape: str) -> np.ndarray:
    """TRIALS independent honest samples of RECENT + LAGGED PM reports (rows): each row's running count, sum and sum
    of squares (shape (TRIALS, RECENT + LAGGED + 1, 3), zeros first), so that any split of a row is two honest
    blocks' statistics. "gaussian": devices from a truncated normal; "one_value": every device at 1 (the largest
    variance of PM's reports, none from the sampling of devices)."""
    mech = pm()
    rng = np.random.default_rng(17 if shape == "gaussian" else 18)
    size = TRIALS * (RECENT + LAGGED)
    values = truncated_gaussian(0.0, 0.25, size, rng) if shape == "gaussian" else np.ones(size)
    reports = np.asarray(mech.perturb(values, rng)["value"]).reshape(TRIALS, RECENT + LAGGED)
    stats = np.stack([np.ones_like(reports), reports, reports * reports], axis=-1)
    return np.concatenate([np.zeros((TRIALS, 1, 3)), np.cumsum(stats, axis=1)], axis=1)


def split(row: np.ndarray, at: int) -> tuple[np.ndarray, np.ndarray]:
    """A trial's first `at` reports and the rest, as a mean's statistics (count, sum, sum of squares)."""
    return row[at], row[-1] - row[at]


@pytest.mark.parametrize("shape", ["gaussian", "one_value"])
def test_the_mean_is_standardized_to_a_standard_normal_on_honest_blocks(shape: str) -> None:
    """y = (mean_block - mean_lag) / sqrt(v (1 / n_block + 1 / n_lag)) over TRIALS independent honest trials, v the
    lagged reports' variance: mean 0 within 4 / sqrt(TRIALS), variance 1 within 4 sqrt(2 / TRIALS) (a normal
    sample variance's standard deviation) plus 2 / LAGGED (v is estimated: y is then about Student's t with LAGGED
    degrees of freedom, of variance 1 + 2 / LAGGED)."""
    trials = honest_trials(shape)
    y = np.array([standardized_shift(pm(), *split(row, RECENT)) for row in trials])
    assert abs(y.mean()) <= 4 / math.sqrt(TRIALS)
    assert abs(y.var() - 1) <= 4 * math.sqrt(2 / TRIALS) + 2 / LAGGED


def test_the_mean_block_tests_flag_honest_blocks_at_their_stated_rates() -> None:
    """The block test (its half of alpha_sequential, two-sided, one statistic) and the long block test (all of
    alpha_long, two-sided) on TRIALS independent honest blocks, through `block_test` and `long_block_test`: each
    flags a trial with its probability alpha (no Bonferroni slack: one statistic), so the count is within 4 binomial
    standard deviations of alpha TRIALS on both sides (alpha = 0.05: 200 +- 55, which a threshold at alpha / 2 or
    2 alpha misses); a loose policy so that the rate is measurable. Each test appends one finding a trial, and a
    clean one holds nothing."""
    shape = "gaussian"
    policy = Policy(alpha_sequential=0.1, alpha_long=0.05, min_reports=100)
    mech = pm()
    nothing = (np.full(1, np.nan), np.full(1, np.nan))
    for test, alpha, at in ((block_test, policy.alpha_sequential / 2, RECENT), (long_block_test, policy.alpha_long,
                                                                                 RECENT // 2)):
        flagged = 0
        for row in honest_trials(shape):
            recent, lagged = split(row, at)
            findings: list[Finding] = []
            held = test(mech, recent, (np.zeros(4), np.append(lagged[0], lagged)), policy, nothing, findings,
                        int(recent[0]))
            assert len(findings) == 1
            found = findings[0].status == SUSPECTED
            flagged += found
            assert found or not np.isfinite(held).any()
        expected = alpha * TRIALS
        assert abs(flagged - expected) <= 4 * math.sqrt(expected * (1 - alpha)), (test.__name__, flagged)


def test_an_attacker_paced_under_the_bound_is_found_and_held_at_the_lagged_mean() -> None:
    """After LONG_WINDOWS - 1 + LONG_LAG honest windows, ten windows in which fakes on [1, PM's largest output]
    raise the mean by a = 0.89 sd of a window's difference from its reference (the window's bound z = 3.39 less the
    benchmark's 2.5 margin) over a reference that has taken in its earlier rises, r_t = a + (r_{t-4} + ... +
    r_{t-1}) / 4: the window's test and the CUSUM (0.39 a window over its drift, against h = 8.7) let it pass, and
    its rise at the tenth window is 4.4 times its first (derived here). The long block test sees the ten rises'
    mean, 2.62 a = 2.62 x 0.89 sqrt(1.25) = 2.6 sd of one window, at 2.6 / sqrt(1 / 10 + 1 / 48) = 7.5 sd, over its
    3.72 by more than 3: the mean is
    found within the ten windows and, at the last, held from above at its lagged windows' mean (up to the rounding
    of the reports set aside), or at a nearer level another test holds it to: a reference of honest windows, within
    4 of its standard deviations under it. The same windows without the fakes have nothing removed."""
    mech = pm()
    rng = np.random.default_rng(23)
    n = 20_000
    history = LONG_WINDOWS - 1 + LONG_LAG
    genuine = [attribute_block(n, mech.accumulate(mech.perturb(truncated_gaussian(0.0, 0.25, n, rng), rng)))
               for _ in range(history + 10)]
    pooled = np.sum(genuine[:history], axis=0)
    v = float(pooled[3] / pooled[1] - (pooled[2] / pooled[1]) ** 2)  # a report's variance
    a = (bonferroni_z(POLICY.alpha_window, 2) - 2.5) * math.sqrt(v / n + v / (REFERENCE * n))
    rises: list[float] = []
    for _ in range(10):
        rises.append(a + sum(rises[-REFERENCE:]) / REFERENCE)
    assert rises[-1] > 4 * rises[0]
    top = mech.output_range[1]
    attacked = list(genuine[:history])
    for rise, block in zip(rises, genuine[history:], strict=True):
        m = round(rise * n / ((1 + top) / 2 - rise))  # fakes of mean (1 + top) / 2 among n reports of mean ~0
        attacked.append(block + attribute_block(m, mech.accumulate(fake_numeric_reports(mech, "adaptive", m, rng))))
    defences = defend_windows(mech, attacked, policy=POLICY)
    found = {f.detector for d in defences[history:] if d is not None for f in d.findings if f.status == SUSPECTED}
    assert LONG in found, found
    last = defences[-1]
    assert last is not None
    held = {f.detector for f in last.findings if f.status == SUSPECTED}
    assert MEAN in held and held & {LONG, BLOCK, CUSUM}, held
    defended = float(mech.estimate((attacked[-1] - last.removed)[1:]).value)
    lagged = np.sum(attacked[history - LONG_LAG:history], axis=0)  # the long block test's at the last window
    level = float(mech.estimate(lagged[1:]).value)
    rounding = top / n  # the reports set aside are a whole number
    assert level - 4 * math.sqrt(v / (REFERENCE * n)) <= defended <= level + rounding
    honest = defend_windows(mech, genuine, policy=POLICY)
    assert all(d is not None and not d.removed.any() for d in honest[history:])
