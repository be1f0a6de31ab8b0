"""The Piecewise Mechanism (PM) for one value in [-1, 1] (000 Sec. III-B, Alg. 2, Eq. 5, Lemma 1).

With C = (e^{eps/2} + 1)/(e^{eps/2} - 1), l(t) = (C + 1) t / 2 - (C - 1) / 2 and r(t) = l(t) + C - 1, the report has
density p = (e^eps - e^{eps/2}) / (2 e^{eps/2} + 2) on [l(t), r(t)] and p / e^eps on the rest of [-C, C] (Eq. 5).
Lemma 1: E[t*] = t and Var[t*] = t^2 / (e^{eps/2} - 1) + (e^{eps/2} + 3) / (3 (e^{eps/2} - 1)^2).

Privacy (000 Lemma 1): every density value is p or p / e^eps, whatever t is, so the ratio of the densities of any
output under two inputs is at most e^eps.

Sampling: one uniform U per value through the inverse of Alg. 2's two-branch choice. With probability
e^{eps/2} / (e^{eps/2} + 1) (the centre's mass) the report is uniform on [l, r]; otherwise it is uniform on the
two side pieces, drawn as y uniform on [-C, l + (C - r)) = [-C, 1) and shifted past the centre when y >= l.
At t = +1 (resp. -1) the right (left) side piece is empty: y never reaches l + C - r = 1 (resp. starts at l = -C),
so the report stays in [-C, C] with no division by an empty length.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.numeric.base import NumericMechanism, VectorScheme


class Piecewise(NumericMechanism):
    """The Piecewise Mechanism: reports in [-C, C], C = (e^{eps/2} + 1) / (e^{eps/2} - 1) (000 Alg. 2).

    Examples
    --------
    >>> import numpy as np
    >>> mech = Piecewise(2.0)
    >>> x = mech.perturb(np.array([-1.0, 0.0, 1.0]), np.random.default_rng(7))["value"]
    >>> bool(np.all(np.abs(x) <= mech.c))
    True
    >>> round(mech.worst_case_variance(), 4)
    1.2276
    """

    name: ClassVar[str] = "pm"
    auto_rank: ClassVar[int] = 20
    vector_scheme: ClassVar[VectorScheme] = "sample"

    @property
    def _half(self) -> float:
        return math.exp(self.epsilon / 2)

    @property
    def c(self) -> float:
        return (self._half + 1) / (self._half - 1)

    @property
    def centre_density(self) -> float:
        """p of 000 Eq. 5."""
        return (math.exp(self.epsilon) - self._half) / (2 * self._half + 2)

    @property
    def centre_mass(self) -> float:
        """P[report in [l(t), r(t)]] = e^{eps/2} / (e^{eps/2} + 1) (000 Alg. 2, line 2)."""
        return self._half / (self._half + 1)

    def left(self, t: np.ndarray | float) -> np.ndarray:
        """l(t) = (C + 1) t / 2 - (C - 1) / 2 (000 Eq. 5)."""
        return (self.c + 1) / 2 * np.asarray(t, dtype=np.float64) - (self.c - 1) / 2

    def variance_coefficients(self) -> tuple[float, float]:
        h = self._half
        return (h + 3) / (3 * (h - 1) ** 2), 1 / (h - 1)  # 000 Lemma 1

    @property
    def output_range(self) -> tuple[float, float]:
        return -self.c, self.c

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        c, pc = self.c, self.centre_mass
        u = rng.random(t.shape[0])
        left = self.left(t)
        in_centre = u < pc
        centre = left + (u / pc) * (c - 1)
        sides = (u - pc) * ((c + 1) / (1 - pc)) - c  # uniform on [-C, 1)
        side = np.where(sides >= left, sides + (c - 1), sides)  # skip the centre [l, r)
        return np.clip(np.where(in_centre, centre, side), -c, c)  # clip: floating-point rounding only

    def output_density(self, t: float, x: np.ndarray) -> np.ndarray:
        """Density of the report at x given t (000 Eq. 5); 0 outside [-C, C]."""
        x = np.asarray(x, dtype=np.float64)
        left = float(self.left(t))
        p = self.centre_density
        inside = (x >= -self.c) & (x <= self.c)
        centre = (x >= left) & (x <= left + self.c - 1)
        return np.where(inside, np.where(centre, p, p / math.exp(self.epsilon)), 0.0)

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        x = np.clip(np.asarray(x, dtype=np.float64), -self.c, self.c)
        left = float(self.left(t))
        right = left + self.c - 1
        p, q = self.centre_density, self.centre_density / math.exp(self.epsilon)
        return (
            q * (np.minimum(x, left) + self.c)
            + p * np.clip(x - left, 0.0, right - left)
            + q * np.clip(x - right, 0.0, self.c - right)
        )
