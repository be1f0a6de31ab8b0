"""What every poisoning detector returns, the policy they share, and the statistical thresholds they use.

A detector looks at one attribute's reports of one window (or only at their additive statistics) and answers a
`Finding`: whether honest perturbation makes what it sees improbable, which reports (or how many, when only sums
are seen) it sets aside, and the statistics those reports contributed, `removed`, in the mechanism's own statistics
layout. The defended statistics are `stats - removed`; the mechanism's estimator turns them into the defended
estimate, so no detector re-implements an estimator (DESIGN.md: the aggregator never re-implements a formula).

Two kinds of false-positive guarantee, both stated by the policy:
- per report (`alpha_report`): a test that flags individual reports (support itemsets, numeric density) flags each
  honest report with probability at most alpha_report, whatever the device's true value, so no population shape
  (heavy Zipf, every device on one value) makes it set aside more than that fraction of genuine reports in
  expectation;
- per window (`alpha_window`): a test on sums (excess claims against a reference, key-value disagreement, a mean's
  jump) flags anything in an honest window with probability at most alpha_window (Bonferroni over its items; normal
  approximation of counts whose expectation is large: windows under `min_reports` reports are not tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

CLEAN = "clean"  # tested, nothing improbable
SUSPECTED = "suspected"  # tested, reports set aside
TOO_FEW = "too_few_reports"  # not tested: fewer reports than the policy's minimum
UNTESTED = "untested"  # no test applies (a mechanism without a detector, or no reference for a reference-only test)
STATUSES = (CLEAN, SUSPECTED, TOO_FEW, UNTESTED)


class PoisoningError(ValueError):
    """An invalid detector argument (a policy out of range, statistics of the wrong shape)."""


@dataclass(frozen=True)
class Policy:
    """The detectors' settings (checked at construction).

    alpha_report: per-report false-positive bound of the tests that flag reports.
    alpha_window: per-window false-positive probability of the tests on sums (family-wise over items).
    drift: how far (absolute frequency, or mean on [-1, 1]) a genuine population may move between a window and its
      reference without being suspected; 0 assumes a stationary population (docs/explanation/fake-devices.md: what
      is and is not defended).
    min_reports: windows (per attribute) with fewer reports are reported as too few to test.
    candidates: items examined for support itemsets (the largest estimates, and those above their reference).
    alert_fraction: the fraction of a window's reports set aside above which the window raises the alert.
    alpha_sequential: the probability that the sequential tests over windows (`sequential.py`: the CUSUM and the
      block test, half each) raise a false alarm on an attribute in an honest window (family-wise over its items and
      both directions).

    alpha_long: the probability that the long block test (`sequential.py`: ten windows against a frozen lagged
      reference; every item both ways, and the top item down; a numeric mean both ways) raises a false alarm on an
      attribute in an honest window.

    The defaults give an attribute's tests on sums a false-alarm budget of alpha_window + alpha_sequential +
    alpha_long = 7e-4 + 1e-4 + 2e-4 = 1e-3 per honest window (union bound): the alert's stated rate, one per
    1,000 honest windows.
    """

    alpha_report: float = 1e-3
    alpha_window: float = 7e-4
    drift: float = 0.0
    min_reports: int = 1000
    candidates: int = 64
    alert_fraction: float = 0.005
    alpha_sequential: float = 1e-4
    alpha_long: float = 2e-4

    def __post_init__(self) -> None:
        for name in ("alpha_report", "alpha_window", "alert_fraction", "alpha_sequential", "alpha_long"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 1):
                raise PoisoningError(f"{name} must lie in (0, 1), got {value!r}")
        if not (isinstance(self.drift, (int, float)) and 0 <= self.drift < 1):
            raise PoisoningError(f"drift must lie in [0, 1), got {self.drift!r}")
        for name, low in (("min_reports", 1), ("candidates", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise PoisoningError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class Finding:
    """One detector's answer for one attribute and window.

    `removed` is in the mechanism's statistics layout (subtract it from the window's statistics); `set_aside` the
    reports it sets aside (a count for per-report tests; for tests on sums, the fewest reports that explain the
    excess, an estimate); `suspects` the item codes (or output bins) it suspects; `bound` the largest gain an
    attacker can keep past this detector in this window, in the estimate's units (summed over the suspects).
    """

    detector: str
    status: str
    reports: int
    set_aside: float = 0.0
    removed: np.ndarray | None = None
    suspects: tuple[int, ...] = ()
    false_positive: float = 0.0
    bound: float = 0.0
    detail: str = ""
    flagged: np.ndarray | None = field(default=None, compare=False)  # rows flagged (per-report tests only)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise PoisoningError(f"status must be one of {STATUSES}, got {self.status!r}")


def bonferroni_z(alpha: float, tests: int) -> float:
    """The one-sided normal quantile z with P(Z > z) = alpha / tests (Bonferroni over `tests` items).

    Examples
    --------
    >>> round(bonferroni_z(0.05, 1), 3)
    1.645
    """
    return float(norm.isf(alpha / max(1, tests)))


def too_few(detector: str, reports: int, policy: Policy) -> Finding:
    """The finding of a window with fewer reports than the policy tests."""
    return Finding(detector, TOO_FEW, reports,
                   detail=f"{reports} report(s): fewer than the {policy.min_reports} this detector needs to test")


def clean(detector: str, reports: int, false_positive: float, bound: float, detail: str = "") -> Finding:
    """The finding of a tested window where nothing is improbable."""
    return Finding(detector, CLEAN, reports, false_positive=false_positive, bound=bound, detail=detail)


def binomial_sd(n: float, p: np.ndarray | float) -> np.ndarray:
    """sqrt(n p (1 - p)), p clipped to [0, 1]."""
    pp = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    return np.sqrt(max(n, 0.0) * pp * (1 - pp))


def upper_mean(mean: float, sd: float, samples: int, z: float = 4.0) -> float:
    """A Monte Carlo mean's upper confidence limit, mean + z sd / sqrt(samples) (z = 4: one in 30000 above)."""
    return mean + z * sd / math.sqrt(max(1, samples))
