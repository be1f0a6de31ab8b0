"""Poisoning detectors for numeric means (000's mechanisms on [-1, 1]: Laplace, Duchi, PM, HM, staircase).

Output poisoning attacks on means (Li et al., "Fine-grained poisoning attacks to local differential privacy
protocols for mean and variance estimation", USENIX Security 2023) send reports an honest device would rarely send,
typically the largest output, to move the mean. Two detectors:

**Output density** (`output_density`, on a closed window's report values). Whatever the population, the share of
honest reports that fall in an interval I is a mixture over true values t of P[report in I | t], so it is at most
cap(I) = max_t P[report in I | t] (evaluated on a grid of t with the mechanism's exact CDF, `output_cdf`). The
output range is cut into bins at several resolutions (a spike is best seen in a narrow bin, a spread excess in a wide
one); a bin is suspected when its count exceeds the upper alpha_window / B quantile of Binomial(n, cap) (exact, as
the caps of tail bins are tiny; Bonferroni over all B bins), so an honest window is flagged with probability <=
alpha_window. Of the resolution with the largest
total excess, each suspected bin's excess count, c - n cap, is set aside: its reports farthest from 0 (an attack's
extreme values first). Reports spread under every cap (an attacker who knows it) are not set aside: the mean's bound
below limits them.

**Mean bound** (`mean_bound`, on the sums alone: count, sum, sum of squares). An honest window's mean is within z
standard errors of the truth, which lies in [-1, 1] and, for a stationary population, is the reference window's;
the standard errors are the reference's per-report variance over each window's count (the null's, which an attacker
cannot inflate): the variance of its reports, which counts the sampling of devices as well as the noise (two windows
are two samples of a population), z two-sided at alpha_window. A mean beyond its bound is brought back to the
reference's mean M (where a test over windows holds it, that level) by setting aside the fewest reports at the
output's extreme that explain its shift from M (derived here: X = n (mean - M) / (y_max - M) for a mean above and
largest output y_max); for an unbounded output (Laplace, staircase) no count explains it, so only the sum is
corrected. Brought back only to the bound, as before, a detected attacker kept what an undetected one keeps.

**Over windows** (`ldpstream.mechanisms.poisoning.sequential`): the mean's standardized excess (`mean_excess`) is
the CUSUM's step, and the block tests compare the latest windows' mean with their lagged windows'
(`standardized_shift`, `mean_shift`); where one of them finds the mean drifting, `mean_bound`'s bound on that side
is the level it holds it to (`held`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.numeric.base import NUMERIC_STATS_SIZE, NumericMechanism
from ldpstream.mechanisms.poisoning.base import (
    SUSPECTED,
    UNTESTED,
    Finding,
    Policy,
    bonferroni_z,
    clean,
    too_few,
)

MEAN = "mean_bound"
DENSITY = "output_density"
RESOLUTIONS = (32, 256, 2048)  # bins across the output range
T_GRID = 401  # true values t on [-1, 1] over which a bin's cap is maximised
TAIL_SDS = 12.0  # an unbounded output range is binned over [-1, 1] widened by this many report standard deviations
MAX_SET_ASIDE = 0.5


def _per_report(reference: Estimate, reference_stats: np.ndarray | None) -> float:
    """The variance of one report under the null: the mechanism's (from the reference's standard error) or, better,
    the reference reports' own, which counts the sampling of devices too."""
    per_report = float(reference.stderr) ** 2 * reference.n
    if reference_stats is not None:
        count_ref, total_ref, squares_ref = (float(x) for x in reference_stats[:NUMERIC_STATS_SIZE])
        per_report = max(per_report, squares_ref / count_ref - (total_ref / count_ref) ** 2)
    return per_report


def _usable(reference: Estimate | None, policy: Policy) -> bool:
    return reference is not None and reference.n >= policy.min_reports and bool(np.isfinite(reference.value))


def mean_excess(mech: NumericMechanism, stats: np.ndarray, reference: Estimate, reference_stats: np.ndarray | None,
                policy: Policy = Policy()) -> float:
    """(mean - reference mean) in standard deviations of an honest window's difference, clipped to the per-window
    test's +-z (the step of `ldpstream.mechanisms.poisoning.sequential`)."""
    n = float(np.asarray(stats, dtype=np.float64)[0])
    per_report = _per_report(reference, reference_stats)
    z = bonferroni_z(policy.alpha_window, 2)
    x = (float(mech.estimate(stats).value) - float(reference.value)) / math.sqrt(per_report / n
                                                                                  + per_report / reference.n)
    return float(np.clip(x, -z, z))


def standardized_shift(mech: NumericMechanism, block: np.ndarray, lagged: np.ndarray) -> float:
    """y = (mean of `block` - mean of `lagged`) / sqrt(v (1 / n_block + 1 / n_lag)), v the lagged windows' variance
    of one report (`_per_report`: device sampling counted), so N(0, 1) when both are honest samples of one
    population; `block` and `lagged` are the statistics of the latest windows together and of the windows before
    them (the block tests of `ldpstream.mechanisms.poisoning.sequential`)."""
    lagged_est = mech.estimate(lagged)
    n_block = float(np.asarray(block, dtype=np.float64)[0])
    per_report = _per_report(lagged_est, np.asarray(lagged, dtype=np.float64))
    return ((float(mech.estimate(block).value) - float(lagged_est.value))
            / math.sqrt(per_report / n_block + per_report / lagged_est.n))


def mean_shift(mech: NumericMechanism, block: np.ndarray, lagged: np.ndarray, alpha: float) -> np.ndarray:
    """[+1] ([-1]) where the mean of the latest windows (`block`) lies above (below) the lagged windows' (`lagged`)
    by more than Phi^-1(1 - alpha / 2) standard deviations (`standardized_shift`: one statistic, two sides, so an
    honest block is flagged with probability alpha), else [0]: a block test's shift of a numeric mean, in the
    layout of a frequency oracle's (`ldpstream.mechanisms.poisoning.frequency.block_shift`)."""
    y = standardized_shift(mech, block, lagged)
    return np.array([math.copysign(1.0, y) if abs(y) > bonferroni_z(alpha, 2) else 0.0])


def mean_bound(mech: NumericMechanism, stats: np.ndarray, reference: Estimate | None = None,
               reference_stats: np.ndarray | None = None, policy: Policy = Policy(),
               held: tuple[float, float] = (math.nan, math.nan)) -> Finding:
    """A mean beyond what an honest window shows, brought back to the reference's mean (module docstring); `stats` and
    `reference_stats` are the mechanism's statistics (they begin with count, sum, sum of squares: a distribution
    mechanism's histogram follows, and only the mean is defended), `reference` its estimate; `held`: the level the
    sequential test holds the mean to from above (below), where it found it drifting (NaN: not held): its bound on
    that side is then that level, or the reference mean where that is nearer."""
    count, total, _ = (float(x) for x in np.asarray(stats, dtype=np.float64)[:NUMERIC_STATS_SIZE])
    n = int(count)
    if n < policy.min_reports:
        return too_few(MEAN, n, policy)
    est = mech.estimate(stats)
    z = bonferroni_z(policy.alpha_window, 2)
    mean = float(est.value)
    usable = _usable(reference, policy)
    if usable:
        assert reference is not None
        per_report = _per_report(reference, reference_stats)
        spread = z * math.sqrt(per_report / n + per_report / reference.n)
        high = min(1.0, float(reference.value) + policy.drift)
        high = min(high, held[0]) if math.isfinite(held[0]) else high + spread
        low = max(-1.0, float(reference.value) - policy.drift)
        low = max(low, held[1]) if math.isfinite(held[1]) else low - spread
        allowance = policy.drift + spread
    else:
        spread = z * float(est.stderr)
        low, high, allowance = -1.0 - spread, 1.0 + spread, math.inf
    if low <= mean <= high:
        return clean(MEAN, n, policy.alpha_window, allowance)
    bound = high if mean > high else low
    # brought back to the reference's mean (a held side: its level, at or inside it), not to the bound, where a
    # detected attacker kept what an undetected one keeps; without a reference, to the range
    if usable:
        assert reference is not None
        level = (min(high, min(1.0, float(reference.value) + policy.drift)) if mean > high
                 else max(low, max(-1.0, float(reference.value) - policy.drift)))
    else:
        level = 1.0 if mean > high else -1.0
    lo, hi = mech.output_range
    extreme = hi if mean > high else lo
    removed = np.zeros(3)
    if math.isfinite(extreme):
        x = float(math.ceil(min(MAX_SET_ASIDE * n, n * (mean - level) / (extreme - level))))
        removed[:] = (x, x * extreme, x * extreme * extreme)
        # the new mean (total - x extreme) / (n - x) is the level up to the rounding of x
    else:
        x = 0.0
        removed[1] = n * (mean - level)
    side = "above" if mean > high else "below"
    return Finding(MEAN, SUSPECTED, n, x, removed, (), policy.alpha_window, allowance,
                   f"mean {mean:.4g} {side} the {'reference' if usable else 'range'} bound {bound:.4g}, brought back "
                   f"to {level:.4g}")


def bin_caps(mech: NumericMechanism, edges: np.ndarray) -> np.ndarray:
    """cap(I) = max over t of P[report in I | t] for the bins between consecutive `edges` (module docstring); the
    outer edges may be infinite."""
    grid = np.linspace(-1.0, 1.0, T_GRID)
    # bins as np.histogram cuts them, [a, b) but the last [a, b]: P = F(b-) - F(a-), F(x-) the mass below x, so
    # that an atom on an edge (Duchi's +-B, HM's) counts in the bin it is histogrammed in
    below = np.nextafter(edges, -np.inf)
    points = np.concatenate([below, edges[-1:]])
    cdf = np.stack([mech.output_cdf(float(t), points) for t in grid])  # type: ignore[attr-defined]
    upper = np.concatenate([cdf[:, 1:-2], cdf[:, -1:]], axis=1)
    return np.clip(np.max(upper - cdf[:, :-2], axis=0), 0.0, 1.0)


def bin_edges(mech: NumericMechanism, bins: int) -> np.ndarray:
    """Equal-width bins over the output range; an unbounded range gets two open tail bins beyond [-1, 1] widened by
    TAIL_SDS report standard deviations."""
    lo, hi = mech.output_range
    if math.isfinite(lo) and math.isfinite(hi):
        return np.linspace(lo, hi, bins + 1)
    width = 1.0 + TAIL_SDS * math.sqrt(mech.worst_case_variance())
    return np.concatenate([[-math.inf], np.linspace(-width, width, bins - 1), [math.inf]])


def output_density(mech: NumericMechanism, values: np.ndarray, policy: Policy = Policy()) -> Finding:
    """Reports in bins holding more than any honest population puts there, set aside (module docstring)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    n = x.size
    if not hasattr(mech, "output_cdf"):
        return Finding(DENSITY, UNTESTED, n, detail=f"{mech.name} declares no output distribution")
    if n < policy.min_reports:
        return too_few(DENSITY, n, policy)
    tail = policy.alpha_window / sum(RESOLUTIONS)  # Bonferroni over every bin of every resolution
    best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
    for bins in RESOLUTIONS:
        edges = bin_edges(mech, bins)
        caps = bin_caps(mech, edges)
        counts = np.histogram(x, bins=np.clip(edges, -1e300, 1e300))[0].astype(np.float64)
        limit = binom.isf(tail, n, caps)  # exact: bins whose caps are tiny hold a few reports by chance
        over = counts > limit
        if over.any():
            excess = np.where(over, np.ceil(counts - n * caps), 0.0)
            if best is None or excess.sum() > best[0]:
                best = (float(excess.sum()), edges, excess, over)
    if best is None:
        return clean(DENSITY, n, policy.alpha_window, 0.0)
    _, edges, excess, over = best
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    flagged = np.zeros(n, dtype=bool)
    budget = int(MAX_SET_ASIDE * n)
    for b in np.flatnonzero(over):
        rows = np.flatnonzero(which == b)
        take = rows[np.argsort(-np.abs(x[rows]), kind="stable")[: min(int(excess[b]), budget)]]
        flagged[take] = True
        budget -= len(take)
    removed = mech.accumulate({"value": x[flagged]})
    return Finding(DENSITY, SUSPECTED, n, float(flagged.sum()), removed, tuple(int(b) for b in np.flatnonzero(over)),
                   policy.alpha_window, 0.0, f"{int(over.sum())} of {len(edges) - 1} output bins above the most an "
                                             f"honest population puts there", flagged)
