"""The contract of a one-dimensional numeric mechanism, and the estimator every numeric mechanism shares.

A numeric mechanism perturbs a value t in [-1, 1] (an attribute's [lo, hi] is mapped there by
`ldpstream.mechanisms.numeric.scaling.RangeScaler`) into one report t* with E[t*] = t. Every mechanism of 000 Sec. III
has a per-user variance that is quadratic in the true value,

    Var[t* | t] = a + b * t**2,                                   (000 Eq. 4, Lemma 1, Eq. 8; Lemma 6 for d > 1)

so a mechanism declares the pair (a, b) and inherits `variance`, `worst_case_variance`, the additive statistics
(count, sum t*, sum t*^2) and the estimator of the mean with its closed-form standard error.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon

# How `ldpstream.mechanisms.multidim.make_vector_mechanism` extends a 1-D mechanism to d attributes (its module
# docstring): "sample" k of d attributes at eps/k (000 Alg. 4), "sample_one" one attribute at eps (001 Alg. 2), "split"
# every attribute at eps/d, "duchi" Duchi et al.'s d-dimensional mechanism (000 Alg. 3).
VectorScheme = Literal["sample", "sample_one", "split", "duchi"]
NUMERIC_STATS_SIZE = 3  # count, sum of reports, sum of squared reports
# Above this budget the closed forms lose all precision in float64 (PM's centre mass e^{eps/2}/(e^{eps/2}+1)
# rounds to 1 near eps = 75) while the privacy guarantee is already void; such an epsilon is refused.
MAX_EPSILON = 50.0


def check_numeric_epsilon(epsilon: float) -> float:
    """`check_epsilon`, and at most MAX_EPSILON."""
    eps = check_epsilon(epsilon)
    if eps > MAX_EPSILON:
        raise LDPError(f"epsilon {eps:g} is above the supported maximum {MAX_EPSILON:g} for numeric mechanisms")
    return eps


def check_unit_values(values: np.ndarray | float | list[float]) -> np.ndarray:
    """The true values as a float64 vector in [-1, 1]; LDPError for NaN, infinities or values outside."""
    t = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if t.ndim != 1:
        raise LDPError(f"a numeric mechanism takes a vector of values, got shape {t.shape}")
    # min/max propagate NaN, and NaN compares false: one pass each catches NaN and out-of-range values.
    if t.size and not (t.min() >= -1.0 and t.max() <= 1.0):
        if np.isnan(t).any():
            raise LDPError("values contain NaN")
        raise LDPError(f"values must lie in [-1, 1]; got min {t.min()}, max {t.max()}")
    return t


def second_moment_plugin(
    count: npt.ArrayLike, total: npt.ArrayLike, total_sq: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike
) -> np.ndarray:
    """Plug-in estimate of mean(t^2) (clipped to [0, 1]) from the report sums, for Var = a + b t^2.

    Since E[t*^2 | t] = Var + t^2 = a + (1 + b) t^2, (mean(t*^2) - a) / (1 + b) is unbiased for mean(t^2)
    when 1 + b != 0. When 1 + b == 0 (Duchi et al.: |t*| is constant) the reports carry no information on
    t^2, and the plug-in is (estimated mean)^2 <= mean(t^2) (Jensen), which can only overstate a variance
    a - t^2, i.e. errs on the side of a larger standard error.
    """
    count, total, total_sq, a, b = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (count, total, total_sq, a, b))
    )
    safe = np.maximum(count, 1.0)
    informative = np.abs(1.0 + b) > 1e-12
    from_squares = (total_sq / safe - a) / np.where(informative, 1.0 + b, 1.0)
    from_mean = (total / safe) ** 2
    return np.clip(np.where(informative, from_squares, from_mean), 0.0, 1.0)


def quadratic_mean_estimate(
    count: npt.ArrayLike, total: npt.ArrayLike, total_sq: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased mean sum/count and its standard error sqrt((a + b * m2) / count), m2 from `second_moment_plugin`.

    With no reports the mean is NaN and the standard error infinite.
    """
    n = np.asarray(count, dtype=np.float64)
    m2 = second_moment_plugin(n, total, total_sq, a, b)
    var = np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64) * m2
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(n > 0, np.asarray(total, dtype=np.float64) / np.maximum(n, 1.0), np.nan)
        stderr = np.where(n > 0, np.sqrt(np.maximum(var, 0.0) / np.maximum(n, 1.0)), np.inf)
    return mean, stderr


class NumericMechanism(Mechanism):
    """An epsilon-LDP mechanism for one value t in [-1, 1]: reports {"value": float64 (n,)} with E[t*] = t."""

    vector_scheme: ClassVar[VectorScheme]
    # False for a mechanism that in one dimension is another registered one (Harmony is Duchi's): `auto` then
    # considers it for d > 1 only (`ldpstream.mechanisms.numeric.auto`).
    auto_one_dimensional: ClassVar[bool] = True

    def __init__(self, epsilon: float) -> None:
        self.epsilon = check_numeric_epsilon(epsilon)

    # --- what a concrete mechanism declares -------------------------------------------------------------
    @abstractmethod
    def variance_coefficients(self) -> tuple[float, float]:
        """(a, b) such that Var[t* | t] = a + b * t**2."""

    @property
    @abstractmethod
    def output_range(self) -> tuple[float, float]:
        """Inclusive bounds of a report value (may be infinite for noise-adding mechanisms)."""

    @property
    def allowed_outputs(self) -> tuple[float, ...] | None:
        """The finite set of report values, for mechanisms with discrete output; None otherwise."""
        return None

    @abstractmethod
    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reports for validated values t in [-1, 1] (vectorised)."""

    @abstractmethod
    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        """P[t* <= x | t], the exact distribution of a report (used by the epsilon-LDP and KS tests)."""

    # --- the shared contract -----------------------------------------------------------------------------
    @property
    def schema(self) -> ReportSchema:
        low, high = self.output_range
        return ReportSchema((Column("value", "float64", low, high, allowed=self.allowed_outputs),))

    @property
    def stats_size(self) -> int:
        return NUMERIC_STATS_SIZE

    def perturb(self, values: np.ndarray | float | list[float], rng: np.random.Generator) -> Reports:
        return {"value": self._sample(check_unit_values(values), rng)}

    def perturb_values(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The report values alone (what the multidimensional and mixed collectors compose)."""
        return self._sample(check_unit_values(values), rng)

    def accumulate(self, reports: Reports) -> np.ndarray:
        x = np.asarray(reports["value"], dtype=np.float64).ravel()
        return np.array([x.size, x.sum(), np.dot(x, x)], dtype=np.float64)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Mean of t over the reporting users; stderr from the closed form with the plug-in of mean(t^2)."""
        count, total, total_sq = np.asarray(stats, dtype=np.float64)
        a, b = self.variance_coefficients()
        mean, stderr = quadratic_mean_estimate(count, total, total_sq, a, b)
        return Estimate(n=int(count), value=mean, stderr=stderr)

    def variance(self, t: np.ndarray | float) -> np.ndarray:
        """Closed-form Var[t* | t] for each true value t in [-1, 1]."""
        a, b = self.variance_coefficients()
        t = check_unit_values(t)
        return a + b * t**2

    def worst_case_variance(self) -> float:
        """max over t in [-1, 1] of Var[t* | t] (at t = 0 if b < 0, at |t| = 1 otherwise)."""
        a, b = self.variance_coefficients()
        return float(a + max(b, 0.0))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g})"
