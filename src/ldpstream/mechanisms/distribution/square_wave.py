"""The Square Wave (SW) mechanism with EMS reconstruction (Li, Wang, Lopuhaä-Zwakenberg, Li, Škorić, "Estimating
Numerical Distributions under Local Differential Privacy", SIGMOD 2020; "Li et al." below).

The mechanism (Li et al. Sec. 4), for v in [0, 1]: the report v~ in [-b, 1 + b] has density p where |v~ - v| <= b and
q elsewhere, with p = e^eps / (2 b e^eps + 1) and q = 1 / (2 b e^eps + 1) (so that 2 b p + q = 1 and p / q = e^eps).
The half-width b maximises an upper bound on the mutual information between v and v~ (Sec. 4.2):

    b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)),

which tends to 1/2 as eps -> 0 and to 0 as eps grows. Here t = 2 v - 1 in [-1, 1] (the numeric mechanisms' interval),
so u = 2 v~ - 1 lies in [-1 - w, 1 + w] with w = 2 b, with density p/2 within w of t and q/2 elsewhere.

Mean (derived here; the paper estimates only the distribution): E[u | t] = s t with s = w (p - q) = 2 b (p - q), so a
device sends t* = u / s, which is unbiased for t like every numeric mechanism's report, in [-(1 + w) / s, (1 + w) / s].
Integrating u^2 against the density,

    Var[t* | t] = a + b' t^2,   a = (q (1 + w)^3 / 3 + s w^2 / 3) / s^2,   b' = (1 - s) / s,

so SW fits `ldpstream.mechanisms.numeric.base.NumericMechanism` (the mean and its standard error are the numeric
mechanisms' shared estimator). At eps = 1 its worst-case variance (5.52) is a little above PM's (5.22): an attribute
asks for SW to get its distribution, not a better mean.

Privacy (Li et al. Sec. 4.1): every density value is p/2 or q/2 whatever t is, so the ratio of the densities of any
output under two inputs is at most p / q = e^eps; `output_cdf` gives the exact distribution the tests check against.

Distribution (Li et al. Sec. 5): the aggregator counts the reports in output cells as wide as the input cells, 2 /
bins, aligned with them and covering [-1 - k w_c, 1 + k w_c] with w_c = 2 / bins and k = ceil(w / w_c) (the paper
splits [-b, 1 + b] into its own number of cells; equal, aligned cells make the channel a convolution, and finer cells
lose nothing). The channel M[j, i] = P[u in cell j | t uniform in cell i] is computed exactly: the uniform part q/2
|cell j inside the support| plus (p - q)/2 times the overlap of cell j with [t - w, t + w] averaged over cell i
(`window_overlap`; the paper's code approximates this average). EMS (`ldpstream.mechanisms.distribution.ems`)
then reconstructs the distribution on the bins, with delta-method standard errors, at the smoothing level `smoothing`
(1: the paper's kernel) or, by default, at the level that cross-validation picks from the reports (see `ems`).

Statistics: [n, sum t*, sum t*^2, the count of every output cell] (additive).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property, lru_cache
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Estimate, LDPError, Reports
from ldpstream.mechanisms.distribution.base import (
    Distribution,
    DistributionMechanism,
    NoiseCovariance,
    check_bins,
    check_distribution_epsilon,
)
from ldpstream.mechanisms.distribution.ems import (
    BandedChannel,
    censored_noise,
    check_smoothing,
    choose_smoothing,
    ems,
    ems_cdf_sensitivity,
)
from ldpstream.mechanisms.numeric.base import NUMERIC_STATS_SIZE, NumericMechanism, second_moment_plugin

DEFAULT_BINS = 64
DISTRIBUTIONS_KEPT = 32  # fitted distributions a SquareWave keeps, by their counts
METHOD = "sw-ems"
STDERR_METHOD = "delta method at the EMS fixed point (multinomial counts of the reports' cells)"


def square_wave_half_width(epsilon: float) -> float:
    """b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)) on [0, 1] (Li et al. Sec. 4.2), by expm1 so that it
    keeps its precision as eps -> 0 (where it tends to 1/2)."""
    e = math.exp(epsilon)
    return (epsilon * e - math.expm1(epsilon)) / (2.0 * e * (math.expm1(epsilon) - epsilon))


def _window_integral(a: np.ndarray, w: float) -> np.ndarray:
    """The integral of max(z, 0) over [a - w, a + w]: 2 a w for a >= w, (a + w)^2 / 2 for |a| < w, 0 below. Written
    piecewise (not as a difference of two squares), it keeps its precision relative to w, however small w is."""
    return np.where(a >= w, 2.0 * a * w, np.where(a > -w, (a + w) ** 2 / 2.0, 0.0))


def window_overlap(x0: np.ndarray | float, x1: np.ndarray | float, y0: np.ndarray | float, y1: np.ndarray | float,
                   w: float) -> np.ndarray:
    """The length of [y0, y1] inside [t - w, t + w], averaged over t uniform on [x0, x1] (broadcasting).

    As a function of t the overlap is the convolution of two boxes, R(t - y0 + w) - R(t - y0 - w) - R(t - y1 + w)
    + R(t - y1 - w) with R(z) = max(z, 0); its antiderivative is the same sum with R replaced by max(z, 0)^2 / 2,
    i.e. `_window_integral(t - y0, w) - _window_integral(t - y1, w)`.
    """
    def integral(t: np.ndarray | float) -> np.ndarray:
        return _window_integral(np.subtract(t, y0), w) - _window_integral(np.subtract(t, y1), w)

    return (integral(x1) - integral(x0)) / np.subtract(x1, x0)


class SquareWave(NumericMechanism, DistributionMechanism):
    """Square Wave on [-1, 1]: reports {"value": float64 (n,)}, t* = u / s unbiased for t, and the distribution of t on
    `bins` bins by EMS (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> mech = SquareWave(1.0, bins=16)
    >>> round(mech.half_width, 4), round(mech.worst_case_variance(), 4)
    (0.2561, 5.5161)
    >>> rng = np.random.default_rng(0)
    >>> stats = mech.accumulate(mech.perturb(rng.uniform(-1.0, 0.0, 50_000), rng))
    >>> median = mech.distribution(stats).quantiles([0.5])[0][0]
    >>> bool(abs(median + 0.5) < 0.05), bool(abs(mech.estimate(stats).value + 0.5) < 0.05)
    (True, True)
    """

    name: ClassVar[str] = "sw"
    auto_rank: ClassVar[int] = 10

    def __init__(self, epsilon: float, bins: int = DEFAULT_BINS, smoothing: float | None = None) -> None:
        super().__init__(check_distribution_epsilon(epsilon))
        self.bins = check_bins(bins)
        self.smoothing = None if smoothing is None else check_smoothing(smoothing)

    @classmethod
    def parameter_names(cls) -> tuple[str, ...]:
        return ("bins", "smoothing")

    # --- the mechanism (Li et al. Sec. 4) -----------------------------------------------------------------
    @cached_property
    def half_width(self) -> float:
        """b on [0, 1] (Li et al. Sec. 4.2)."""
        return square_wave_half_width(self.epsilon)

    @cached_property
    def p(self) -> float:
        """The density within b of v on [0, 1]: e^eps / (2 b e^eps + 1)."""
        return math.exp(self.epsilon) / (2.0 * self.half_width * math.exp(self.epsilon) + 1.0)

    @cached_property
    def q(self) -> float:
        """The density elsewhere on [-b, 1 + b]: 1 / (2 b e^eps + 1) = p / e^eps."""
        return 1.0 / (2.0 * self.half_width * math.exp(self.epsilon) + 1.0)

    @property
    def window(self) -> float:
        """w = 2 b: the half-width of the window around t, on [-1, 1]."""
        return 2.0 * self.half_width

    @cached_property
    def scale(self) -> float:
        """s = 2 b (p - q): E[u | t] = s t."""
        return self.window * (self.p - self.q)

    def variance_coefficients(self) -> tuple[float, float]:
        s, w = self.scale, self.window
        return (self.q * (1.0 + w) ** 3 / 3.0 + s * w * w / 3.0) / s**2, (1.0 - s) / s

    @property
    def output_range(self) -> tuple[float, float]:
        bound = (1.0 + self.window) / self.scale
        return -bound, bound

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.from_uniform(t, rng.random(t.shape))

    def from_uniform(self, t: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The reports t* of values t in [-1, 1] from one uniform u in [0, 1) each (what another SDK reproduces,
        tests/vectors/distribution.json): through the inverse CDF of v~ on [0, 1], whose left piece [-b, v - b) has
        mass q v, the window p 2 b, the right piece q (1 - v)."""
        b, p, q = self.half_width, self.p, self.q
        v = (np.asarray(t, dtype=np.float64) + 1.0) / 2.0
        left, window = q * v, 2.0 * b * p
        y = np.where(u < left, u / q - b,
                     np.where(u < left + window, v - b + (u - left) / p, v + b + (u - left - window) / q))
        y = np.clip(y, -b, 1.0 + b)  # floating-point rounding only
        return (2.0 * y - 1.0) / self.scale

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        """P[t* <= x | t] = P[u <= s x], u with density q/2 on [-1 - w, 1 + w] plus (p - q)/2 on [t - w, t + w]."""
        w = self.window
        z = self.scale * np.asarray(x, dtype=np.float64)
        return (self.q / 2.0 * (np.clip(z, -1.0 - w, 1.0 + w) + 1.0 + w)
                + (self.p - self.q) / 2.0 * np.clip(z - t + w, 0.0, 2.0 * w))

    # --- the output cells and the channel (Li et al. Sec. 5) ------------------------------------------------
    @property
    def cell(self) -> float:
        """The width of every input and output cell on [-1, 1]: 2 / bins."""
        return 2.0 / self.bins

    @cached_property
    def margin(self) -> int:
        """k: the output cells on each side beyond [-1, 1], enough to cover the window w."""
        return math.ceil(self.window / self.cell - 1e-9)

    @property
    def output_cells(self) -> int:
        return self.bins + 2 * self.margin

    @cached_property
    def output_edges(self) -> np.ndarray:
        """The output cells' edges on u's scale: -1 - k w_c, ..., 1 + k w_c."""
        return -1.0 - self.margin * self.cell + self.cell * np.arange(self.output_cells + 1)

    @cached_property
    def channel(self) -> BandedChannel:
        """M[j, i] = P[u in output cell j | t uniform in input cell i] (module docstring). An output cell j faces
        input cell i at the offset (j - i - k) cells, so the band runs over j - i in [-1, 2 k + 1]."""
        w, edges = self.window, self.output_edges
        inside = np.clip(np.minimum(edges[1:], 1.0 + w) - np.maximum(edges[:-1], -1.0 - w), 0.0, None)
        shifts = (np.arange(-1, 2 * self.margin + 2) - self.margin) * self.cell
        band = (self.p - self.q) / 2.0 * window_overlap(0.0, self.cell, shifts, shifts + self.cell, w)
        return BandedChannel(self.q / 2.0 * inside, band, offset=-1, inputs=self.bins)

    def cells_of(self, reports: np.ndarray) -> np.ndarray:
        """The output cell of every report value (u = s t*; the end points fall in the end cells)."""
        u = self.scale * np.asarray(reports, dtype=np.float64)
        cells = np.floor((u - self.output_edges[0]) / self.cell).astype(np.int64)
        return np.clip(cells, 0, self.output_cells - 1)

    # --- the contract -------------------------------------------------------------------------------------
    @property
    def stats_size(self) -> int:
        return NUMERIC_STATS_SIZE + self.output_cells

    def accumulate(self, reports: Reports) -> np.ndarray:
        x = np.asarray(reports["value"], dtype=np.float64).ravel()
        counts = np.bincount(self.cells_of(x), minlength=self.output_cells).astype(np.float64)
        return np.concatenate([[x.size, x.sum(), np.dot(x, x)], counts])

    def _checked(self, stats: np.ndarray) -> np.ndarray:
        s = np.asarray(stats, dtype=np.float64)
        if s.shape != (self.stats_size,) or not np.isfinite(s).all():
            raise LDPError(f"statistics must be {self.stats_size} finite numbers, got shape {s.shape}")
        return s

    def estimate(self, stats: np.ndarray) -> Estimate:
        """The mean of t from (n, sum t*, sum t*^2), as every numeric mechanism's."""
        return super().estimate(self._checked(stats)[:NUMERIC_STATS_SIZE])

    def second_moment(self, stats: np.ndarray) -> float:
        count, total, total_sq = self._checked(stats)[:NUMERIC_STATS_SIZE]
        return float(second_moment_plugin(count, total, total_sq, *self.variance_coefficients()))

    def distribution(self, stats: np.ndarray) -> Distribution:
        """EMS on the output cells' counts, with delta-method standard errors (module docstring). The last
        DISTRIBUTIONS_KEPT results are kept by their counts: a window that got no new report is not fitted again."""
        counts = self._checked(stats)[NUMERIC_STATS_SIZE:]
        if np.any(counts < 0) or counts.sum() <= 0:
            raise LDPError("no reports (or negative counts): no distribution to estimate")
        return self._fitted(counts.tobytes())

    @cached_property
    def _fitted(self) -> Callable[[bytes], Distribution]:
        return lru_cache(maxsize=DISTRIBUTIONS_KEPT)(self._fit)

    def _fit(self, counts_bytes: bytes) -> Distribution:
        counts = np.frombuffer(counts_bytes, dtype=np.float64)
        level, start = self.smoothing, None
        if level is None:
            choice = choose_smoothing(self.channel, counts)
            level, start = choice.level, choice.start
        fit = ems(self.channel, counts, level, start=start)
        n = counts.sum()
        pi = self.channel.forward(fit.theta)
        rows, diagonal, low_rank = censored_noise(ems_cdf_sensitivity(self.channel, counts, fit.theta, level), pi, n)
        cdf = np.concatenate([[0.0], np.minimum(np.cumsum(fit.theta), 1.0)])
        chosen_by = "cross-validation" if self.smoothing is None else "given"
        return Distribution(METHOD, int(n), self.edges, fit.theta, cdf, rows,
                            NoiseCovariance(diagonal, low_rank), STDERR_METHOD,
                            {"smoothing": level, "smoothing_chosen_by": chosen_by, "ems_steps": fit.steps,
                             "converged": fit.converged})

    def __repr__(self) -> str:
        smoothing = "" if self.smoothing is None else f", smoothing={self.smoothing:g}"
        return f"SquareWave(epsilon={self.epsilon:g}, bins={self.bins}{smoothing})"
