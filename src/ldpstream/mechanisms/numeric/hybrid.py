"""The Hybrid Mechanism (HM) for one value in [-1, 1] (000 Sec. III-C, Lemma 3, Eq. 6-8).

With probability alpha the report comes from PM at eps, otherwise from Duchi et al.'s 1-D mechanism at eps, where
alpha = 1 - e^{-eps/2} if eps > eps* and 0 otherwise (Eq. 7), eps* ~ 0.61 from Eq. 6.
Var[t* | t] = alpha Var_PM(t) + (1 - alpha) Var_Du(t) (Sec. III-C). For eps > eps* the t^2 terms cancel,
alpha / (e^{eps/2} - 1) - (1 - alpha) = 0, so the variance is the constant of Eq. 8 for every t; for eps <= eps*
HM is Duchi et al.'s mechanism (B^2 - t^2).

Privacy: the coin does not depend on t, so the report's distribution is alpha * (PM's density) on [-C, C] plus
(1 - alpha) * (Duchi's two atoms at +-B, B < C). Each part alone has ratio <= e^eps between any two inputs
(000 Lemma 1 and Eq. 3), hence so has every event.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.numeric.base import NumericMechanism, VectorScheme
from ldpstream.mechanisms.numeric.duchi import Duchi
from ldpstream.mechanisms.numeric.piecewise import Piecewise

# 000 Eq. 6: eps* = ln((-5 + 2 cbrt(6353 - 405 sqrt 241) + 2 cbrt(6353 + 405 sqrt 241)) / 27) ~ 0.6094.
EPSILON_STAR = math.log(
    (-5 + 2 * math.cbrt(6353 - 405 * math.sqrt(241)) + 2 * math.cbrt(6353 + 405 * math.sqrt(241))) / 27
)


def hybrid_alpha(epsilon: float) -> float:
    """Probability of using PM (000 Eq. 7)."""
    return 1 - math.exp(-epsilon / 2) if epsilon > EPSILON_STAR else 0.0


class Hybrid(NumericMechanism):
    """HM: PM with probability alpha (000 Eq. 7), Duchi et al. otherwise; never worse than either (Corollary 1).

    Examples
    --------
    >>> round(Hybrid(1.0).worst_case_variance(), 4)
    4.289
    >>> Hybrid(0.5).worst_case_variance() == Duchi(0.5).worst_case_variance()
    True
    """

    name: ClassVar[str] = "hm"
    auto_rank: ClassVar[int] = 10  # first: for eps <= eps* HM is Duchi's mechanism, and HM is the one chosen
    vector_scheme: ClassVar[VectorScheme] = "sample"

    def __init__(self, epsilon: float) -> None:
        super().__init__(epsilon)
        self.alpha = hybrid_alpha(self.epsilon)
        self.piecewise = Piecewise(self.epsilon)
        self.duchi = Duchi(self.epsilon)

    def variance_coefficients(self) -> tuple[float, float]:
        (ap, bp), (ad, bd) = self.piecewise.variance_coefficients(), self.duchi.variance_coefficients()
        alpha = self.alpha
        b = alpha * bp + (1 - alpha) * bd
        return alpha * ap + (1 - alpha) * ad, (0.0 if abs(b) < 1e-12 else b)  # b is exactly 0 above eps* (Eq. 8)

    @property
    def output_range(self) -> tuple[float, float]:
        return (-self.piecewise.c, self.piecewise.c) if self.alpha > 0 else self.duchi.output_range

    @property
    def allowed_outputs(self) -> tuple[float, ...] | None:
        return None if self.alpha > 0 else self.duchi.allowed_outputs

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        use_pm = rng.random(t.shape[0]) < self.alpha
        out = np.empty_like(t)
        out[use_pm] = self.piecewise._sample(t[use_pm], rng)
        out[~use_pm] = self.duchi._sample(t[~use_pm], rng)
        return out

    def output_density(self, t: float, x: np.ndarray) -> np.ndarray:
        """Density of the continuous part at x given t: alpha times PM's density (000 Eq. 5)."""
        return self.alpha * self.piecewise.output_density(t, x)

    def output_pmf(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The atoms +-B and their probabilities (1 - alpha) P_Duchi[+-B | t] (000 Eq. 3)."""
        values, probs = self.duchi.output_pmf(t)
        return values, (1 - self.alpha) * probs

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        return self.alpha * self.piecewise.output_cdf(t, x) + (1 - self.alpha) * self.duchi.output_cdf(t, x)
