"""Duchi et al.'s mechanism for one value (000 Alg. 1) and the constants of its d-dimensional form (000 Alg. 3).

One dimension: t* = +B with probability 1/2 + t (e^eps - 1) / (2 e^eps + 2), else -B, where
B = (e^eps + 1) / (e^eps - 1) (000 Eq. 3). Unbiased with Var = B^2 - t^2 (000 Eq. 4).
Privacy: P[+B | t] / P[+B | t'] <= P[+B | 1] / P[+B | -1] = e^eps, and the same for -B.

d dimensions (used by `ldpstream.mechanisms.multidim.DuchiVector`): v in {-1, 1}^d with P[v_j = 1] = (1 + t_j) / 2, then
an output z in {-1, 1}^d drawn with P[z | v] proportional to e^eps when z.v > 0 and to 1 when z.v <= 0, reported as B_d
z. That is 001 Sec. 3.1's fix of 000 Alg. 3 (001's Pr[u = 1] = e^eps C / ((e^eps - 1) C + 2^d), C = #{z : z.v > 0}).
Every P[z | v] is e^eps / Z or 1 / Z with the same Z for all v, and P[z | t] is a mixture over v, so every probability
ratio is <= e^eps (proved exactly for d = 1..10 in tests/mechanisms/test_multidim.py). By symmetry E[z | v] = c v with c
= (e^eps - 1) binom(d - 1, floor((d - 1)/2)) / Z, so B_d = 1 / c makes B_d z unbiased:

    B_d = ((e^eps - 1) C + 2^d) / ((e^eps - 1) binom(d - 1, floor((d - 1) / 2))),

which equals (e^eps + 1)/(e^eps - 1) * 2^{d-1} / binom(d - 1, (d - 1)/2) for odd d (000 Eq. 9-10) and 001 Eq. 2 for
even d. Errata, checked exactly in the tests: 000 Alg. 3 as printed (T+ = {z.v >= 0}, T- = {z.v <= 0},
Pr[u = 1] = e^eps / (e^eps + 1)) with 000 Eq. 9's even-d constant is unbiased but gives tied outputs (z.v = 0)
probability (e^eps + 1) times that of z.v < 0 outputs, so it is only ln(e^eps + 1)-LDP for even d; 001 Alg. 1
(T+ = {z.v > 0}) with u ~ e^eps / (e^eps + 1) is biased and, at d = 2, 3 e^eps-ratio (001 Sec. 3.1).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import check_epsilon
from ldpstream.mechanisms.numeric.base import NumericMechanism, VectorScheme


def duchi_bound_1d(epsilon: float) -> float:
    """B = (e^eps + 1) / (e^eps - 1), the magnitude of a 1-D Duchi report (000 Eq. 3)."""
    return 1.0 / math.tanh(check_epsilon(epsilon) / 2.0)


def agreement_weights(epsilon: float, dims: int) -> np.ndarray:
    """w[a], a = 0..d: P[z | v] = w[a] for each z agreeing with v in a coordinates (z.v = 2a - d > 0 gets e^eps).

    Normalised so that sum_a binom(d, a) w[a] = 1.
    """
    eps = check_epsilon(epsilon)
    a = np.arange(dims + 1)
    positive = 2 * a > dims
    n_positive = sum(math.comb(dims, int(i)) for i in a[positive])
    # Z = (e^eps - 1) C + 2^d, computed as a ratio to 2^d so that large d does not overflow.
    z_over_2d = math.expm1(eps) * float(Fraction(n_positive, 2**dims)) + 1.0
    return np.where(positive, math.exp(eps), 1.0) / (z_over_2d * 2.0**dims)


def duchi_bound(epsilon: float, dims: int) -> float:
    """B_d such that B_d z is unbiased for t under `agreement_weights` (module docstring; 001 Eq. 2, 000 Eq. 10)."""
    eps = check_epsilon(epsilon)
    n_positive = sum(math.comb(dims, a) for a in range(dims + 1) if 2 * a > dims)
    central = math.comb(dims - 1, (dims - 1) // 2)
    numerator = math.expm1(eps) * float(Fraction(n_positive, 2**dims)) + 1.0
    return numerator / (math.expm1(eps) * float(Fraction(central, 2**dims)))


class Duchi(NumericMechanism):
    """Duchi et al.'s one-dimensional mechanism: t* in {-B, B}, B = (e^eps + 1)/(e^eps - 1) (000 Alg. 1).

    Examples
    --------
    >>> import numpy as np
    >>> mech = Duchi(1.0)
    >>> sorted(set(np.round(mech.perturb(np.zeros(50), np.random.default_rng(0))["value"], 6).tolist()))
    [-2.163953, 2.163953]
    """

    name: ClassVar[str] = "duchi"
    auto_rank: ClassVar[int] = 40
    vector_scheme: ClassVar[VectorScheme] = "duchi"

    @property
    def bound(self) -> float:
        return duchi_bound_1d(self.epsilon)

    def prob_positive(self, t: np.ndarray | float) -> np.ndarray:
        """P[t* = +B | t] = 1/2 + t (e^eps - 1) / (2 e^eps + 2) (000 Eq. 3)."""
        return 0.5 + 0.5 * np.asarray(t, dtype=np.float64) / self.bound

    def variance_coefficients(self) -> tuple[float, float]:
        return self.bound**2, -1.0  # 000 Eq. 4

    @property
    def output_range(self) -> tuple[float, float]:
        return -self.bound, self.bound

    @property
    def allowed_outputs(self) -> tuple[float, ...]:
        return (-self.bound, self.bound)

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.where(rng.random(t.shape[0]) < self.prob_positive(t), self.bound, -self.bound)

    def output_pmf(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(values, probabilities) of the report given t."""
        p = float(self.prob_positive(t))
        return np.array([-self.bound, self.bound]), np.array([1.0 - p, p])

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        p = float(self.prob_positive(t))
        x = np.asarray(x, dtype=np.float64)
        return np.where(x >= self.bound, 1.0, np.where(x >= -self.bound, 1.0 - p, 0.0))
