"""PrivUnitG and PrivUnit2: the optimal randomizers of a unit vector (and, by rounding, of the unit L2 ball).

Both are *cap* mechanisms. With v the device's unit vector (`round_to_sphere` of its clipped gradient), the output
U is drawn from a rotation-invariant base law, conditioned on its projection alpha = <U, v> being at least gamma
with probability p and below gamma otherwise:
- PrivUnitG (Asi, Feldman and Talwar, ICML 2022, "AFT22", algorithm PrivUnitG): the base law is N(0, I_d),
  so alpha ~ N(0, 1) and the part of U orthogonal to v is a standard Gaussian of the orthogonal complement;
- PrivUnit2 (Bhowmick, Duchi, Freudiger, Kapoor and Rogers 2018, "BDFKR18", PrivUnit2): the base law is uniform
  on the sphere S^{d-1}, so alpha has density prop. to (1 - alpha^2)^((d-3)/2) on [-1, 1], i.e. (1 + alpha)/2 ~
  Beta((d-1)/2, (d-1)/2), and given alpha, U = alpha v + sqrt(1 - alpha^2) w with w uniform on the unit sphere of
  the complement of v.

Privacy (by construction). Let q = P[alpha >= gamma] under the base law. The output's density relative to the base
law is p/q where <u, v> >= gamma and (1-p)/(1-q) elsewhere, whatever v is; the base density does not depend on v.
So for two inputs the density ratio is one of 1, r, 1/r with r = p(1-q) / ((1-p) q), and the mechanism is eps-LDP
iff r <= e^eps (BDFKR18 state a sufficient condition through eps0 + eps1; AFT22 use this exact one). We
take r = e^eps exactly: q = p / (p + e^eps (1 - p)) = expit(logit(p) - eps), gamma its quantile
(`CapParameters.density_ratio` recomputes r from gamma for the tests).

Unbiasedness and error. E[U | v] = m v with m = E[alpha] (the orthogonal part has mean 0 by symmetry), so the
report U / m is unbiased for v, hence for the clipped gradient x (E[v] = x).
- PrivUnitG: with phi, Phi the normal density and cdf, E[alpha | alpha >= gamma] = phi(gamma)/q and
  E[alpha | alpha < gamma] = -phi(gamma)/(1-q), so m = phi(gamma) (p/q - (1-p)/(1-q)) (AFT22's scale; their code
  calls 1/m sigma). E[alpha^2 | alpha >= gamma] = 1 + gamma phi(gamma)/q, E[alpha^2 | alpha < gamma] =
  1 - gamma phi(gamma)/(1-q). E||U||^2 = E[alpha^2] + (d - 1), hence for a unit x
      MSE = E||U/m||^2 - 1 = (E[alpha^2] + d - 1) / m^2 - 1.
  AFT22 minimise 1/m^2 over p (their "d sigma^2" proxy); we minimise this exact MSE over p for each d, which
  moves it by under 0.1% at d >= 100.
- PrivUnit2: with a = (d-1)/2, int_gamma^1 t (1-t^2)^(a-1) dt = (1-gamma^2)^a / (d-1) and the normaliser is
  B(1/2, a), so E[alpha 1{alpha >= gamma}] = (1-gamma^2)^a / ((d-1) B(1/2, a)) = -E[alpha 1{alpha < gamma}] and
      m = (1-gamma^2)^a / ((d-1) B(1/2, a)) * (p/q - (1-p)/(1-q)),   MSE = 1/m^2 - 1  (||U|| = 1).
  "Optimised parameters" (AFT22): p is chosen to minimise this MSE, gamma follows from the privacy equation,
  rather than BDFKR18's split of eps into eps0 (the cap) and eps1 (p).
For a row x of norm r < 1 both give E||x_hat - x||^2 = MSE + 1 - r^2 (||x_hat|| has the same law for any v).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.gradients.base import (
    GradientMechanism,
    Norm,
    bytes_of,
    orthogonal_part,
    round_to_sphere,
    unit_rows,
)
from ldpstream.mechanisms.gradients.wire import float_column

# The search over p: this many logits of p on [-2, eps + 12], then Brent's method between the best one's neighbours.
P_GRID = 241


@dataclass(frozen=True)
class CapParameters:
    """(p, gamma) of a cap mechanism, q = P[alpha >= gamma] under the base law, the scale m = E[alpha] and
    E[alpha^2] (module docstring); `mse` is the per-report error for a unit vector."""

    p: float
    gamma: float
    q: float
    scale: float
    second_moment: float
    mse: float

    def density_ratio(self, upper_tail: float) -> float:
        """r = p (1 - q') / ((1 - p) q') for q' = `upper_tail`, the base law's P[alpha >= gamma] recomputed by the
        caller from gamma: the largest ratio of the output densities of two inputs (module docstring)."""
        return self.p * (1.0 - upper_tail) / ((1.0 - self.p) * upper_tail)


def _cap_odds(logit: float, epsilon: float) -> tuple[float, float, float, float]:
    """(p, 1 - p, q, 1 - q) for p = expit(logit) and the q with p (1-q) / ((1-p) q) = e^eps, i.e.
    q = expit(logit - eps), each computed without cancellation."""
    from scipy.special import expit

    return float(expit(logit)), float(expit(-logit)), float(expit(logit - epsilon)), float(expit(epsilon - logit))


def gaussian_cap(logit: float, epsilon: float, dims: int) -> CapParameters:
    """PrivUnitG's parameters for p = expit(logit) (module docstring)."""
    from scipy.special import ndtri

    p, not_p, q, not_q = _cap_odds(logit, epsilon)
    gamma = -float(ndtri(q))
    phi = math.exp(-gamma * gamma / 2) / math.sqrt(2 * math.pi)
    scale = phi * (p / q - not_p / not_q)
    second = p * (1 + gamma * phi / q) + not_p * (1 - gamma * phi / not_q)
    return CapParameters(p, gamma, q, scale, second, (second + dims - 1) / scale**2 - 1)


def spherical_cap(logit: float, epsilon: float, dims: int) -> CapParameters:
    """PrivUnit2's parameters for p = expit(logit) (module docstring); d >= 2."""
    from scipy.special import betaincinv, betaln

    a = (dims - 1) / 2
    p, not_p, q, not_q = _cap_odds(logit, epsilon)
    gamma = 1.0 - 2.0 * float(betaincinv(a, a, q))  # P[(1 + alpha)/2 >= (1 + gamma)/2] = I_{(1-gamma)/2}(a, a) = q
    log_tail_mean = a * math.log1p(-gamma * gamma) - math.log(dims - 1) - float(betaln(0.5, a))
    scale = math.exp(log_tail_mean) * (p / q - not_p / not_q)
    return CapParameters(p, gamma, q, scale, 1.0, 1.0 / scale**2 - 1)


@lru_cache(maxsize=256)
def optimal_cap(kind: str, epsilon: float, dims: int) -> CapParameters:
    """The p minimising the unit-vector MSE of PrivUnitG ("gaussian") or PrivUnit2 ("sphere") at (d, eps)."""
    from scipy.optimize import minimize_scalar

    family = gaussian_cap if kind == "gaussian" else spherical_cap

    def mse(logit: float) -> float:
        with np.errstate(all="ignore"):
            try:
                value = family(logit, epsilon, dims).mse
            except (ZeroDivisionError, OverflowError, ValueError):
                return math.inf
        return value if math.isfinite(value) and value > 0 else math.inf

    grid = np.linspace(-2.0, epsilon + 12.0, P_GRID)
    values = [mse(float(t)) for t in grid]
    best = int(np.argmin(values))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, P_GRID - 1)]
    found = minimize_scalar(mse, bounds=(float(low), float(high)), method="bounded", options={"xatol": 1e-10})
    return family(float(found.x) if found.fun <= values[best] else float(grid[best]), epsilon, dims)


class CapMechanism(GradientMechanism):
    """What PrivUnitG and PrivUnit2 share: the cap parameters, the unbiased rescaling, the decoding."""

    norm: ClassVar[Norm] = "l2"
    kind: ClassVar[str]

    def __init__(self, dims: int, epsilon: float) -> None:
        super().__init__(dims, epsilon)
        self.cap = optimal_cap(self.kind, self.epsilon, self.dims)

    def unit_mse(self) -> float:
        return self.cap.mse

    def report_bytes(self) -> int:
        return bytes_of(("float64", self.dims))

    def privatize(self, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The unbiased (n, d) reports U / m for unit rows v."""
        n: int = v.shape[0]
        above = rng.random(n) < self.cap.p
        u = 1.0 - rng.random(n)  # in (0, 1]: the quantile functions below stay finite
        alpha = self.projections(above, u)
        return self.assemble(alpha, v, rng) / self.cap.scale

    def projections(self, above: np.ndarray, u: np.ndarray) -> np.ndarray:
        """alpha = <U, v> per row: the base law conditioned on [gamma, inf) where `above`, else below gamma,
        by inversion of its cdf at the uniforms u."""
        raise NotImplementedError

    def assemble(self, alpha: np.ndarray, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """U from its projection alpha on v and a fresh orthogonal part."""
        raise NotImplementedError

    def perturb(self, gradients: np.ndarray, rng: np.random.Generator) -> Reports:
        x = self.check(gradients)
        return {"value": self.privatize(round_to_sphere(x, rng), rng)}

    def decode(self, reports: Reports) -> np.ndarray:
        return float_column(reports, "value", self.dims)


class PrivUnitG(CapMechanism):
    """PrivUnitG (AFT22): Gaussian output conditioned on its projection on v (module docstring).

    Examples
    --------
    >>> m = PrivUnitG(dims=100, epsilon=4.0)
    >>> round(m.mse(), 1)
    43.5
    >>> x = np.zeros((1, 100)); x[0, 0] = 1.0
    >>> m.perturb(x, np.random.default_rng(0))["value"].shape
    (1, 100)
    """

    name: ClassVar[str] = "privunitg"
    kind: ClassVar[str] = "gaussian"

    def projections(self, above: np.ndarray, u: np.ndarray) -> np.ndarray:
        from scipy.special import ndtri

        q = self.cap.q
        return np.where(above, -ndtri(u * q), ndtri(u * (1.0 - q)))

    def assemble(self, alpha: np.ndarray, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return orthogonal_part(rng.standard_normal(v.shape), v) + alpha[:, None] * v


class PrivUnit2(CapMechanism):
    """PrivUnit2 (BDFKR18) with AFT22's optimised p: a uniform point of the sphere's cap or its complement.

    Examples
    --------
    >>> m = PrivUnit2(dims=100, epsilon=4.0)
    >>> m.mse() < PrivUnitG(dims=100, epsilon=4.0).mse()
    True
    """

    name: ClassVar[str] = "privunit2"
    kind: ClassVar[str] = "sphere"

    def __init__(self, dims: int, epsilon: float) -> None:
        if isinstance(dims, int) and not isinstance(dims, bool) and dims == 1:
            raise LDPError("privunit2 needs dims >= 2 (the sphere S^0 has no caps); use privunitg or duchi-l2")
        super().__init__(dims, epsilon)

    def projections(self, above: np.ndarray, u: np.ndarray) -> np.ndarray:
        from scipy.special import betaincinv

        a = (self.dims - 1) / 2
        q = self.cap.q
        # (1 + alpha)/2 ~ Beta(a, a), symmetric: the upper tail [gamma, 1] is 1 - 2 Beta^{-1}(u q).
        return np.where(above, 1.0 - 2.0 * betaincinv(a, a, u * q), 2.0 * betaincinv(a, a, u * (1.0 - q)) - 1.0)

    def assemble(self, alpha: np.ndarray, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        w = unit_rows(orthogonal_part(rng.standard_normal(v.shape), v))
        return alpha[:, None] * v + np.sqrt(np.maximum(1.0 - alpha**2, 0.0))[:, None] * w
