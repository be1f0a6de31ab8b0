"""The Gaussian mechanism on L2-clipped vectors: the (epsilon, delta) reference point beside the pure-LDP randomizers.

A device adds N(0, sigma^2 I_d) to its vector u (||u||_2 <= 1). Two inputs differ by at most Delta = 2 in L2, so by
the analytic Gaussian mechanism (Balle and Wang, "Improving the Gaussian mechanism for differential privacy:
analytical calibration and optimal denoising", ICML 2018, Theorem 8) a report is (eps, delta)-LDP iff
    Phi(Delta / (2 sigma) - eps sigma / Delta) - e^eps Phi(-Delta / (2 sigma) - eps sigma / Delta) <= delta,
whose left side falls as sigma grows; `analytic_sigma` finds the smallest such sigma by bisection. The report is u
plus zero-mean noise, so the mean of n reports is unbiased with MSE d sigma^2 / n (for n = 1: d sigma^2).
"""

from __future__ import annotations

import math

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon

SENSITIVITY = 2.0  # the L2 diameter of the unit ball
BISECTION_STEPS = 100


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = SENSITIVITY) -> float:
    """The smallest delta at which N(0, sigma^2) noise on a query of L2 sensitivity `sensitivity` is (eps, delta)-DP
    (Balle and Wang 2018, Theorem 8)."""
    from scipy.special import log_ndtr, ndtr

    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + float(log_ndtr(-a - b))))


def analytic_sigma(epsilon: float, delta: float, sensitivity: float = SENSITIVITY) -> float:
    """The smallest sigma for which the Gaussian mechanism is (eps, delta)-DP (to a relative 1e-12, rounded up).

    Examples
    --------
    >>> round(analytic_sigma(1.0, 1e-5, 1.0), 4)  # Balle and Wang's Fig. 1 regime: below the classic 4.84
    3.7306
    """
    eps = check_epsilon(epsilon)
    if not 0 < delta < 1:
        raise LDPError(f"delta must lie in (0, 1), got {delta!r}")
    lo, hi = 1e-6 * sensitivity, sensitivity
    while gaussian_delta(hi, eps, sensitivity) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if gaussian_delta(mid, eps, sensitivity) <= delta else (mid, hi)
        if hi / lo - 1 < 1e-12:
            break
    return hi


class GaussianVector:
    """Per device: u + N(0, sigma^2 I_d), (eps, delta)-LDP for ||u||_2 <= 1 (module docstring)."""

    norm = "l2"

    def __init__(self, dims: int, epsilon: float, delta: float) -> None:
        if dims < 1:
            raise LDPError(f"dims must be >= 1, got {dims}")
        self.dims, self.epsilon, self.delta = int(dims), check_epsilon(epsilon), float(delta)
        self.sigma = analytic_sigma(self.epsilon, self.delta)

    def perturb(self, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One noisy report per row of the (n, d) clipped vectors."""
        u = np.asarray(vectors, dtype=np.float64)
        if u.ndim != 2 or u.shape[1] != self.dims:
            raise LDPError(f"expected vectors of shape (n, {self.dims}), got {u.shape}")
        if np.any(np.einsum("ij,ij->i", u, u) > 1.0 + 1e-9):
            raise LDPError("the Gaussian mechanism takes vectors of L2 norm at most 1")
        return u + rng.normal(0.0, self.sigma, u.shape)

    def mean(self, reports: np.ndarray) -> np.ndarray:
        """The unbiased mean of the reports' vectors."""
        return np.asarray(reports, dtype=np.float64).mean(axis=0)

    def mse(self, d: int) -> float:
        """E ||report - u||^2 = d sigma^2."""
        return d * self.sigma**2
