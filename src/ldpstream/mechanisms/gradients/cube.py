"""The cube mechanisms of `ldpstream.mechanisms.multidim` (PM and HM with k-of-d sampling, Duchi et al.'s
d-dimensional mechanism) behind the gradient API, for gradients clipped to [-1, 1]^d (L-infinity norm 1).

Their error is the sum of the per-attribute closed forms Var[t*_j | t_j] = a + b t_j^2 (000 Lemma 6 with its
erratum, `ldpstream.mechanisms.multidim`): E||x_hat - x||^2 = d a + b ||x||^2, so d a + b for a unit-L2-norm x
(which lies in the cube). Privacy and unbiasedness are those of the wrapped mechanism (its module docstring).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.gradients.base import GradientMechanism, Norm, bytes_of
from ldpstream.mechanisms.multidim import make_vector_mechanism


class CubeGradient(GradientMechanism):
    """A vector mechanism of `ldpstream.mechanisms.multidim` answering the gradient API."""

    norm: ClassVar[Norm] = "linf"
    takes_k: ClassVar[bool] = False

    def __init__(self, dims: int, epsilon: float, k: int | None = None) -> None:
        super().__init__(dims, epsilon)
        if k is not None and not self.takes_k:
            raise LDPError(f"{self.name!r} takes no k (only the sampling mechanisms pm and hm do)")
        self.vector = make_vector_mechanism(self.name, self.epsilon, self.dims, k=k)
        self.k = getattr(self.vector, "k", None)

    def parameters(self) -> dict[str, Any]:
        return {"k": self.k} if self.takes_k else {}

    def unit_mse(self) -> float:
        a, b = self.vector.variance_coefficients()
        return self.dims * a + b

    def report_bytes(self) -> int:
        return bytes_of(*((c.dtype, c.width) for c in self.vector.schema.columns))

    def perturb(self, gradients: np.ndarray, rng: np.random.Generator) -> Reports:
        return self.vector.perturb(self.check(gradients), rng)

    def decode(self, reports: Reports) -> np.ndarray:
        bad = self.vector.schema.violations(reports)
        if bad.size and (bad != "").any():
            raise LDPError(f"invalid {self.name} report: {bad[bad != ''][0]}")
        return self.vector.dense(reports)


class PMGradient(CubeGradient):
    """PM with k-of-d sampling (000 Alg. 4) on [-1, 1]^d gradients.

    Examples
    --------
    >>> round(PMGradient(dims=100, epsilon=4.0).mse())
    963
    """

    name: ClassVar[str] = "pm"
    takes_k: ClassVar[bool] = True


class HMGradient(CubeGradient):
    """HM with k-of-d sampling (000 Alg. 4) on [-1, 1]^d gradients.

    Examples
    --------
    >>> round(HMGradient(dims=100, epsilon=4.0).mse())
    2289
    """

    name: ClassVar[str] = "hm"
    takes_k: ClassVar[bool] = True


class DuchiGradient(CubeGradient):
    """Duchi et al.'s d-dimensional mechanism (000 Alg. 3, 001 Sec. 3.1's fix) on [-1, 1]^d gradients.

    Examples
    --------
    >>> DuchiGradient(dims=10, epsilon=2.0).report_bytes()
    80
    """

    name: ClassVar[str] = "duchi"
