"""SCDF and the Staircase mechanism: piecewise-constant noise added to a value in [-1, 1] (000 Sec. III-A, Eq. 2).

The noise n has density a(m) on [-m, m] and a(m) * e^{-(j+1) eps} on [m + 2j, m + 2(j + 1)] (and its mirror
image) for j = 0, 1, 2, ...; t* = t + n.

Erratum: 000 Eq. 2 as printed gives a(m) * e^{-j eps} on [m + 2j, m + 2(j + 1)] for j in N, which is not a
density (it integrates to 1 + eps for SCDF's a = eps/4, and the step right of the centre would equal the centre).
Geng et al.'s staircase (sensitivity Delta = 2, gamma = m / 2) puts a * e^{-eps} on the first step, so the exponent
is (j + 1) eps for j >= 0. With that reading both parameter sets of the paper integrate to exactly 1, which the
tests check numerically.

Privacy: the density f(x) = a * exp(-eps * k(x)) with k(x) = 0 on [-m, m] and k(x) = j + 1 on the j-th step.
Since every step has width 2 (the sensitivity) and the centre 2m <= 2, moving x by at most 2 changes k by at most
1, so f(x - t) / f(x - t') <= e^eps for all t, t' in [-1, 1].

Variance (derived here, 000 gives none): with r = e^{-eps} and L_j = m + 2j,
    Var[n] = 2a [ m^3/3 + sum_j r^{j+1} ((L_j + 2)^3 - L_j^3) / 3 ]
           = 2a [ m^3/3 + (2m^2 + 4m + 8/3) S0 + (8m + 8) S1 + 8 S2 ],
where S0 = r/(1-r), S1 = r^2/(1-r)^2 and S2 = r^2 (1+r)/(1-r)^3 are sum_j j^i r^{j+1} for i = 0, 1, 2.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.numeric.base import NumericMechanism, VectorScheme


class StaircaseNoise(NumericMechanism):
    """Additive staircase noise with centre half-width m and centre density a (000 Eq. 2, corrected)."""

    vector_scheme: ClassVar[VectorScheme] = "split"

    @property
    @abstractmethod
    def m(self) -> float:
        """Half-width of the centre piece."""

    @property
    @abstractmethod
    def a(self) -> float:
        """Density of the centre piece."""

    @property
    def _ratio(self) -> float:
        return math.exp(-self.epsilon)

    def variance_coefficients(self) -> tuple[float, float]:
        m, a, r = self.m, self.a, self._ratio
        s0, s1, s2 = r / (1 - r), r**2 / (1 - r) ** 2, r**2 * (1 + r) / (1 - r) ** 3
        var = 2 * a * (m**3 / 3 + (2 * m**2 + 4 * m + 8 / 3) * s0 + (8 * m + 8) * s1 + 8 * s2)
        return var, 0.0

    @property
    def output_range(self) -> tuple[float, float]:
        return -np.inf, np.inf

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = t.shape[0]
        u = rng.random(n)
        centre = rng.random(n) < 2 * self.m * self.a  # mass of [-m, m]
        step = rng.geometric(1.0 - self._ratio, size=n) - 1  # P(j) = (1 - r) r^j, j >= 0
        magnitude = np.where(centre, self.m * u, self.m + 2.0 * (step + u))
        sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        return t + sign * magnitude

    def noise_density(self, x: np.ndarray) -> np.ndarray:
        """Density of the noise n at x."""
        ax = np.abs(np.asarray(x, dtype=np.float64))
        k = np.where(ax <= self.m, 0.0, np.floor((ax - self.m) / 2.0) + 1.0)
        return self.a * np.exp(-self.epsilon * k)

    def output_density(self, t: float, x: np.ndarray) -> np.ndarray:
        return self.noise_density(np.asarray(x, dtype=np.float64) - t)

    def noise_cdf(self, x: np.ndarray) -> np.ndarray:
        """P[n <= x]."""
        x = np.asarray(x, dtype=np.float64)
        ax, m, a, r = np.abs(x), self.m, self.a, self._ratio
        j = np.floor(np.maximum(ax - m, 0.0) / 2.0)
        full_steps = 2 * a * r * (1 - r**j) / (1 - r)
        outside = a * m + full_steps + a * r ** (j + 1) * (ax - m - 2 * j)
        upper_half = np.where(ax <= m, a * ax, outside)  # mass of [0, |x|]
        return np.where(x >= 0, 0.5 + upper_half, 0.5 - upper_half)

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        return self.noise_cdf(np.asarray(x, dtype=np.float64) - t)


class SCDF(StaircaseNoise):
    """Soria-Comas and Domingo-Ferrer's noise: m = 2 (1 - e^-eps - eps e^-eps) / (eps - eps e^-eps), a = eps/4.

    Examples
    --------
    >>> round(SCDF(1.0).worst_case_variance(), 4) > 0
    True
    """

    name: ClassVar[str] = "scdf"
    auto_rank: ClassVar[int] = 60

    @property
    def m(self) -> float:
        e, r = self.epsilon, math.exp(-self.epsilon)
        return 2 * (1 - r - e * r) / (e - e * r)  # 000 Sec. III-A

    @property
    def a(self) -> float:
        return self.epsilon / 4


class Staircase(StaircaseNoise):
    """Geng et al.'s Staircase: m = 2 / (1 + e^{eps/2}), a = (1 - e^-eps) / (2m + 4e^-eps - 2m e^-eps).

    Examples
    --------
    >>> Staircase(2.0).perturb([0.5], __import__("numpy").random.default_rng(1))["value"].shape
    (1,)
    """

    name: ClassVar[str] = "staircase"
    auto_rank: ClassVar[int] = 50

    @property
    def m(self) -> float:
        return 2 / (1 + math.exp(self.epsilon / 2))  # 000 Sec. III-A

    @property
    def a(self) -> float:
        m, r = self.m, math.exp(-self.epsilon)
        return (1 - r) / (2 * m + 4 * r - 2 * m * r)
