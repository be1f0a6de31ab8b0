"""Duchi, Jordan and Wainwright's L2-ball mechanism ("Minimax optimal procedures for locally private estimation",
JASA 2018, "DJW18", their L2-ball sampling strategy): the classic baseline for vectors clipped to L2 norm 1.

Construction. v = `round_to_sphere(x)` (DJW18's first step: +-x/||x|| with P[+] = (1 + ||x||)/2, so E[v] = x).
With pi = e^eps / (1 + e^eps), a uniform point U of the unit sphere is drawn from the hemisphere {<u, v> > 0} with
probability pi and from the opposite one otherwise, and the report is Z = B U.

Privacy. The density of U is 2 pi / A on v's hemisphere and 2 (1 - pi) / A on the other (A the sphere's area), so
for any two inputs the ratio is at most pi / (1 - pi) = e^eps.

Unbiasedness. With c_d = E|<U, v>| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)) for U uniform on S^{d-1} (the mean of
|alpha| under the density prop. to (1 - alpha^2)^((d-3)/2)), E[U | v] = (2 pi - 1) c_d v = tanh(eps/2) c_d v, so
B = 1 / (tanh(eps/2) c_d) makes E[Z] = E[v] = x (DJW18 state B through the same Gamma-function ratio; we derive
it from c_d here, and the simulation of tests/mechanisms/test_gradients.py confirms it unbiased).

Error. ||Z|| = B always, so for a unit x: MSE = E||Z||^2 - ||x||^2 = B^2 - 1 (and B^2 - ||x||^2 in general).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Reports
from ldpstream.mechanisms.gradients.base import GradientMechanism, Norm, bytes_of, round_to_sphere, unit_rows
from ldpstream.mechanisms.gradients.wire import float_column


def hemisphere_mean(dims: int) -> float:
    """c_d = E|<U, v>| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2)) for U uniform on the unit sphere of R^d."""
    return math.exp(math.lgamma(dims / 2) - math.lgamma((dims + 1) / 2)) / math.sqrt(math.pi)


class DuchiL2(GradientMechanism):
    """DJW18's L2-ball mechanism: a point of radius B on the hemisphere of v with probability e^eps / (1 + e^eps).

    Examples
    --------
    >>> m = DuchiL2(dims=100, epsilon=4.0)
    >>> round(m.mse(), 1)
    167.2
    >>> z = m.perturb(np.eye(100)[:2], np.random.default_rng(1))["value"]
    >>> bool(np.allclose(np.linalg.norm(z, axis=1), m.radius))
    True
    """

    name: ClassVar[str] = "duchi-l2"
    norm: ClassVar[Norm] = "l2"

    def __init__(self, dims: int, epsilon: float) -> None:
        super().__init__(dims, epsilon)
        self.toward = math.exp(self.epsilon) / (1.0 + math.exp(self.epsilon))  # pi
        self.radius = 1.0 / (math.tanh(self.epsilon / 2) * hemisphere_mean(self.dims))  # B

    def unit_mse(self) -> float:
        return self.radius**2 - 1.0

    def report_bytes(self) -> int:
        return bytes_of(("float64", self.dims))

    def perturb(self, gradients: np.ndarray, rng: np.random.Generator) -> Reports:
        v = round_to_sphere(self.check(gradients), rng)
        u = unit_rows(rng.standard_normal(v.shape))
        toward = rng.random(v.shape[0]) < self.toward
        side = np.einsum("ij,ij->i", u, v) > 0
        # Reflecting u -> -u maps one hemisphere onto the other and keeps the uniform law.
        flip = np.where(side == toward, 1.0, -1.0)
        return {"value": self.radius * flip[:, None] * u}

    def decode(self, reports: Reports) -> np.ndarray:
        return float_column(reports, "value", self.dims)
