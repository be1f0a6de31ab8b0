"""An estimated distribution on a grid, with standard errors for everything read from it.

A distribution mechanism (`DistributionMechanism`: Square Wave with EMS,
`ldpstream.mechanisms.distribution.square_wave`; hierarchical histograms, `ldpstream.mechanisms.distribution.hierarchy`)
turns a window's statistics into a `Distribution`: bin edges (the grid), the probability of every bin, and the CDF at
the edges. Its standard errors come from one first-order form shared by both: the CDF at the edges is (to first
order, exactly for a linear estimator) a linear function of a noise vector z of the statistics,

    F_hat(edges) ~ F + R z,        Cov(z) = diag(v) - U U^T,

with R the `sensitivity` (rows: edges) and (v, U) the `NoiseCovariance`. Anything linear in the CDF then has its
variance in closed form: a range probability F(b) - F(a), the CDF between edges (F is linear inside a bin: the
density is uniform there), the mean (minus the integral of F), and a quantile by the delta method,
Var[x_alpha] ~ Var[F_hat(x_alpha)] / f(x_alpha)^2 (van der Vaart, Asymptotic Statistics, Cor. 21.5).

Everything is on the mechanisms' unit interval [-1, 1]; `rescaled(lo, hi)` maps the grid onto an attribute's range
(an affine map of x leaves every probability unchanged).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from ldpstream.mechanisms.base import LDPError, Mechanism, check_epsilon

# Quantile levels reported by default: the median, the quartiles and the tails a telemetry dashboard shows.
DEFAULT_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
MIN_BINS, MAX_BINS = 4, 1024  # the largest grid keeps an estimate on read within about a second
# Above this budget SW's window (2 b ~ 2 eps e^-eps) is below 1e-7 of the interval and its channel loses its precision
# in float64, while the privacy guarantee is long void; such an epsilon is refused.
MAX_EPSILON = 20.0


def check_distribution_epsilon(epsilon: float) -> float:
    """`check_epsilon`, and at most MAX_EPSILON."""
    eps = check_epsilon(epsilon)
    if eps > MAX_EPSILON:
        raise LDPError(f"epsilon {eps:g} is above the supported maximum {MAX_EPSILON:g} for distribution mechanisms")
    return eps


def check_bins(bins: int) -> int:
    """The number of bins as an int in [MIN_BINS, MAX_BINS], or LDPError."""
    if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or not MIN_BINS <= bins <= MAX_BINS:
        raise LDPError(f"bins must be an integer in [{MIN_BINS}, {MAX_BINS}], got {bins!r}")
    return int(bins)


def check_levels(levels: Sequence[float]) -> np.ndarray:
    """Quantile levels as a float64 vector in (0, 1), or LDPError."""
    a = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if a.ndim != 1 or not np.all((a > 0) & (a < 1)):  # NaN fails the comparison
        raise LDPError(f"quantile levels must lie strictly between 0 and 1, got {list(np.ravel(a))}")
    return a


@dataclass(frozen=True)
class NoiseCovariance:
    """Cov(z) = diag(diagonal) - low_rank low_rank^T for the noise vector z of a window's statistics."""

    diagonal: np.ndarray
    low_rank: np.ndarray

    def variance(self, rows: np.ndarray) -> np.ndarray:
        """Var[rows @ z] for each row of `rows` (k, m), floored at 0 (rounding)."""
        rows = np.atleast_2d(rows)
        var = (rows**2) @ self.diagonal - np.sum((rows @ self.low_rank) ** 2, axis=1)
        return np.maximum(var, 0.0)


@dataclass(frozen=True)
class Distribution:
    """An estimated distribution on [edges[0], edges[-1]] (module docstring).

    `probabilities` are the bins' masses (non-negative, summing to 1: what the density shows); `cdf` is the estimate
    of the CDF at the edges whose standard errors `cdf_stderr` are (a linear estimator's CDF may step outside [0, 1]
    or down by a rounding-size amount: quantiles read its monotone envelope). `details` says how it was computed.

    Examples
    --------
    >>> import numpy as np
    >>> z = NoiseCovariance(np.full(2, 0.01), np.zeros((2, 1)))
    >>> d = Distribution("example", 100, np.array([-1.0, 0.0, 1.0]), np.array([0.25, 0.75]),
    ...                  np.array([0.0, 0.25, 1.0]), np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]), z, "exact")
    >>> d.quantiles([0.5])[0].round(4).tolist(), d.cdf_stderr.tolist()
    ([0.3333], [0.0, 0.1, 0.0])
    """

    method: str
    n: int
    edges: np.ndarray
    probabilities: np.ndarray
    cdf: np.ndarray
    sensitivity: np.ndarray
    noise: NoiseCovariance
    stderr_method: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def widths(self) -> np.ndarray:
        return np.diff(self.edges)

    @property
    def density(self) -> np.ndarray:
        """The density in each bin (probability per unit of x)."""
        return self.probabilities / self.widths

    @cached_property
    def cdf_stderr(self) -> np.ndarray:
        """The standard error of the CDF at every edge."""
        return np.sqrt(self.noise.variance(self.sensitivity))

    @cached_property
    def monotone_cdf(self) -> np.ndarray:
        """The CDF made non-decreasing and in [0, 1] (running maximum, clipped): what quantiles invert."""
        return np.clip(np.maximum.accumulate(self.cdf), 0.0, 1.0)

    def _at(self, x: np.ndarray, cdf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, sensitivity rows) of the piecewise-linear CDF at points x inside the grid."""
        x = np.clip(np.asarray(x, dtype=np.float64), self.edges[0], self.edges[-1])
        k = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, len(self.edges) - 2)
        frac = (x - self.edges[k]) / self.widths[k]
        value = cdf[k] + frac * (cdf[k + 1] - cdf[k])
        rows = self.sensitivity[k] + frac[:, None] * (self.sensitivity[k + 1] - self.sensitivity[k])
        return value, rows

    def cdf_at(self, x: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(F(x), its standard error) at points x (clipped into the grid), linear inside a bin."""
        value, rows = self._at(np.atleast_1d(x), self.cdf)
        return value, np.sqrt(self.noise.variance(rows))

    def range_probability(self, low: float, high: float) -> tuple[float, float]:
        """(P[low < X <= high], its standard error): a range count as a fraction of the reports."""
        if not low <= high:
            raise LDPError(f"a range needs low <= high, got [{low}, {high}]")
        value, rows = self._at(np.array([low, high]), self.cdf)
        return float(value[1] - value[0]), float(np.sqrt(self.noise.variance(rows[1] - rows[0]))[0])

    def mean(self) -> tuple[float, float]:
        """(the mean, its standard error): E[X] = hi - integral of F over the grid (F linear in each bin)."""
        w = self.widths
        trapezoid = np.zeros(len(self.edges))
        trapezoid[:-1] += w / 2
        trapezoid[1:] += w / 2
        value = self.edges[-1] - trapezoid @ self.cdf
        return float(value), float(np.sqrt(self.noise.variance(trapezoid @ self.sensitivity))[0])

    def quantiles(self, levels: Sequence[float] = DEFAULT_QUANTILES) -> tuple[np.ndarray, np.ndarray]:
        """(x_alpha, standard error) per level alpha: the monotone CDF inverted linearly inside its bin; the error
        by the delta method, the CDF's standard error at x_alpha over the density there (inf where it is 0)."""
        alpha = check_levels(levels)
        mono = self.monotone_cdf
        k = np.clip(np.searchsorted(mono, alpha, side="left") - 1, 0, len(self.edges) - 2)
        rise = mono[k + 1] - mono[k]
        frac = np.where(rise > 0, (alpha - mono[k]) / np.where(rise > 0, rise, 1.0), 0.0)
        x = self.edges[k] + np.clip(frac, 0.0, 1.0) * self.widths[k]
        _, se_f = self.cdf_at(x)
        density = rise / self.widths[k]
        with np.errstate(divide="ignore"):
            stderr = np.where(density > 0, se_f / np.where(density > 0, density, 1.0), np.inf)
        return x, stderr

    def rescaled(self, lo: float, hi: float) -> Distribution:
        """The same distribution with its grid mapped affinely from [edges[0], edges[-1]] onto [lo, hi]."""
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise LDPError(f"a range needs finite lo < hi, got [{lo}, {hi}]")
        a, b = self.edges[0], self.edges[-1]
        return replace(self, edges=lo + (self.edges - a) * ((hi - lo) / (b - a)))

    def to_dict(self, levels: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, Any]:
        """The JSON form (`ldp mechanisms distribution --json`, the aggregator's "distribution" entry): {"method",
        "reports", "grid" (the d + 1 bin edges), "density" (d values, per unit of the attribute), "probabilities" (d
        bin masses), "cdf" and "cdf_stderr" (at the edges), "quantiles" {level: {"estimate", "stderr"}}, "mean"
        {"estimate", "stderr"} (the distribution's), "stderr_method", "details"}. Non-finite numbers are null."""
        x, se = self.quantiles(levels)
        mean, mean_se = self.mean()
        return {
            "method": self.method,
            "reports": self.n,
            "grid": self.edges.tolist(),
            "density": _floats(self.density),
            "probabilities": _floats(self.probabilities),
            "cdf": _floats(self.cdf),
            "cdf_stderr": _floats(self.cdf_stderr),
            "quantiles": {f"{level:g}": {"estimate": _float(v), "stderr": _float(s)}
                          for level, v, s in zip(check_levels(levels), x, se, strict=True)},
            "mean": {"estimate": _float(mean), "stderr": _float(mean_se)},
            "stderr_method": self.stderr_method,
            "details": dict(self.details),
        }


def _float(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _floats(a: np.ndarray) -> list[float | None]:
    return [_float(x) for x in np.asarray(a, dtype=np.float64)]


class DistributionMechanism(Mechanism):
    """A mechanism for one numeric value t in [-1, 1] whose statistics also give its distribution on `bins` bins
    (the `estimate` of the contract is the mean of t, with its standard error)."""

    bins: int

    @property
    def edges(self) -> np.ndarray:
        """The grid: bins + 1 equally spaced edges over [-1, 1]."""
        return np.linspace(-1.0, 1.0, self.bins + 1)

    @abstractmethod
    def distribution(self, stats: np.ndarray) -> Distribution:
        """The distribution of t over the reports a statistics vector holds; LDPError if it holds none."""

    @abstractmethod
    def second_moment(self, stats: np.ndarray) -> float:
        """A plug-in estimate of mean(t^2) in [0, 1] (the mixed collector's sampling term of the mean's variance)."""

    @abstractmethod
    def worst_case_variance(self) -> float:
        """The largest n * Var of the estimated mean over the inputs (what `ldp mechanisms list` shows)."""

    @classmethod
    @abstractmethod
    def parameter_names(cls) -> tuple[str, ...]:
        """The structural parameters a spec may set (keywords of the constructor after epsilon)."""
