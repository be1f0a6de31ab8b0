"""The Laplace mechanism for one value in [-1, 1] (000 Sec. III-A).

Privacy: t* = t + Lap(2/eps). The sensitivity of t on [-1, 1] is 2, so for any outputs x and inputs t, t'
the density ratio is exp((|x - t'| - |x - t|) * eps / 2) <= exp(|t - t'| * eps / 2) <= e^eps.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.numeric.base import NumericMechanism, VectorScheme

SENSITIVITY = 2.0  # width of [-1, 1]


class Laplace(NumericMechanism):
    """t* = t + Lap(2 / eps); unbiased with variance 8 / eps^2 for every t (000 Sec. III-A).

    Examples
    --------
    >>> import numpy as np
    >>> mech = Laplace(1.0)
    >>> mech.worst_case_variance()
    8.0
    >>> mech.perturb(np.zeros(3), np.random.default_rng(0))["value"].shape
    (3,)
    """

    name: ClassVar[str] = "laplace"
    auto_rank: ClassVar[int] = 70
    vector_scheme: ClassVar[VectorScheme] = "split"

    @property
    def scale(self) -> float:
        return SENSITIVITY / self.epsilon

    def variance_coefficients(self) -> tuple[float, float]:
        return 2.0 * self.scale**2, 0.0  # Var Lap(lambda) = 2 lambda^2 = 8 / eps^2

    @property
    def output_range(self) -> tuple[float, float]:
        return -np.inf, np.inf

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return t + rng.laplace(0.0, self.scale, size=t.shape)

    def output_density(self, t: float, x: np.ndarray) -> np.ndarray:
        """Density of t* at x given t."""
        return np.exp(-np.abs(np.asarray(x, dtype=np.float64) - t) / self.scale) / (2.0 * self.scale)

    def output_cdf(self, t: float, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - t) / self.scale
        return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0.0)), 1.0 - 0.5 * np.exp(-np.maximum(z, 0.0)))
