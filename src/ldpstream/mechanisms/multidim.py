"""Vector mechanisms over [-1, 1]^d: what the SGD coordinator and the collection pipeline call.

`make_vector_mechanism(name, epsilon, dims, k=None)` builds the d-dimensional form of every numeric mechanism of
`ldpstream.mechanisms.registry`, by the `vector_scheme` its class declares:
- "sample" (PM, HM): 000 Alg. 4 - each user samples k = max(1, min(d, floor(eps / 2.5))) attributes (Eq. 12)
  without replacement, perturbs each at eps / k with the 1-D mechanism and scales it by d / k; the others are 0.
- "sample_one" (Harmony): 001 Alg. 2 - one uniformly sampled attribute per user, its 1-bit report at the full eps,
  scaled by d (Alg. 4 with k = 1 and Harmony's/Duchi's 1-bit mechanism).
- "duchi" (Duchi): Duchi et al.'s d-dimensional mechanism (000 Alg. 3) as corrected by 001 Sec. 3.1 (see
  `ldpstream.mechanisms.numeric.duchi`): every coordinate of every report is +-B_d.
- "split" (Laplace, SCDF, Staircase): the budget-splitting baseline, every attribute perturbed at eps / d.

All implement the `Mechanism` contract. Reports: the sampling mechanisms send only the sampled attributes,
{"index": int64 (n, k), "value": float64 (n, k)} (columns of shape (n,) when k = 1, as the schema's width-1 rule
says); the others send {"value": float64 (n, d)}. `perturb_dense` gives the (n, d) per-user unbiased vectors
directly; `dense(reports)` turns a report batch into them. Statistics: [n, sum_j t*_j, sum_j t*_j^2] per attribute
(length 1 + 2d), and `estimate` gives the mean vector with a per-attribute standard error from the closed form
Var[t*_j | t_j] = a + b t_j^2 (000 Lemma 6), with the plug-in of mean(t_j^2) of `ldpstream.mechanisms.numeric.base`.

Privacy: sampling is independent of the data, and each sampled attribute gets an eps/k-LDP mechanism, so a
report is eps-LDP by sequential composition (000 Lemma 4); the same argument with k = d covers budget splitting;
the corrected Duchi mechanism's argument is in `ldpstream.mechanisms.numeric.duchi`.

Lemma 6 erratum: for HM with eps/k <= eps* (HM is then Duchi et al.'s mechanism) the per-attribute variance is
(d/k) B^2 - t^2, not (d/k) B^2 + (d/k - 1) t^2 as printed; in general Var = (d/k)(Var_1(t) + t^2) - t^2.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon
from ldpstream.mechanisms.numeric.base import check_numeric_epsilon, check_unit_values, quadratic_mean_estimate
from ldpstream.mechanisms.numeric.duchi import agreement_weights, duchi_bound

MAX_DUCHI_DIMS = 1023  # `DuchiVector`'s agreement weights are divided by 2^d, a float64 up to 2^1023


def vector_names() -> tuple[str, ...]:
    """The names `make_vector_mechanism` takes: every registered numeric mechanism has a d-dimensional form."""
    return tuple(registry.NUMERIC)


def sampled_attributes(epsilon: float, dims: int) -> int:
    """k = max(1, min(d, floor(eps / 2.5))) (000 Eq. 12)."""
    return max(1, min(dims, math.floor(epsilon / 2.5)))


def check_dims(dims: int) -> int:
    if isinstance(dims, bool) or not isinstance(dims, int | np.integer) or dims < 1:
        raise LDPError(f"dims must be a positive integer, got {dims!r}")
    return int(dims)


def check_unit_matrix(values: np.ndarray, dims: int) -> np.ndarray:
    """The true vectors as float64 (n, d) in [-1, 1]^d (a single vector is a batch of one)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != dims:
        raise LDPError(f"expected vectors of dimension {dims}, got shape {np.shape(values)}")
    check_unit_values(x.ravel())
    return x


class VectorMechanism(Mechanism):
    """An eps-LDP mechanism for one vector in [-1, 1]^d per user, with unbiased per-attribute reports."""

    dims: int

    @abstractmethod
    def variance_coefficients(self) -> tuple[float, float]:
        """(a, b) with Var[t*_j | t_j] = a + b t_j^2 for every attribute j."""

    @abstractmethod
    def perturb_dense(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Per-user unbiased vectors, float64 (n, d) (what SGD averages)."""

    @abstractmethod
    def dense(self, reports: Reports) -> np.ndarray:
        """The (n, d) unbiased vectors a report batch stands for."""

    @property
    def stats_size(self) -> int:
        return 1 + 2 * self.dims

    def accumulate(self, reports: Reports) -> np.ndarray:
        x = self.dense(reports)
        return np.concatenate([[x.shape[0]], x.sum(axis=0), np.einsum("ij,ij->j", x, x)]).astype(np.float64)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Mean vector of the users' t, with per-attribute standard errors (closed form, plug-in of mean t^2)."""
        stats = np.asarray(stats, dtype=np.float64)
        d = self.dims
        a, b = self.variance_coefficients()
        mean, stderr = quadratic_mean_estimate(stats[0], stats[1 : 1 + d], stats[1 + d :], a, b)
        return Estimate(n=int(stats[0]), value=mean, stderr=stderr)

    def variance(self, t: np.ndarray) -> np.ndarray:
        """Closed-form Var[t*_j | t_j], elementwise for true values t (any shape) in [-1, 1]."""
        a, b = self.variance_coefficients()
        t = np.asarray(t, dtype=np.float64)
        check_unit_values(t.ravel())
        return a + b * t**2

    def worst_case_variance(self) -> float:
        """max over t_j in [-1, 1] of Var[t*_j | t_j], per attribute (000 Lemma 6)."""
        a, b = self.variance_coefficients()
        return float(a + max(b, 0.0))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, epsilon={self.epsilon:g}, dims={self.dims})"


class SampledVectorMechanism(VectorMechanism):
    """Sample k of d attributes per user, perturb each at eps / k with a 1-D mechanism, scale by d / k (000 Alg. 4)."""

    def __init__(self, name: str, epsilon: float, dims: int, k: int | None = None) -> None:
        self.name = name  # type: ignore[misc]
        self.epsilon = check_epsilon(epsilon)
        self.dims = check_dims(dims)
        self.k = sampled_attributes(self.epsilon, self.dims) if k is None else check_dims(k)
        if self.k > self.dims:
            raise LDPError(f"cannot sample k = {self.k} of d = {self.dims} attributes")
        self.base = registry.numeric_class(name)(self.epsilon / self.k)
        self.scale = self.dims / self.k

    def variance_coefficients(self) -> tuple[float, float]:
        # Var = (d/k)(a' + (1 + b') t^2) - t^2: reported w.p. k/d as (d/k) x with E[x^2] = a' + (1 + b') t^2.
        a, b = self.base.variance_coefficients()
        return self.scale * a, self.scale * (1 + b) - 1

    @property
    def schema(self) -> ReportSchema:
        low, high = self.base.output_range
        allowed = self.base.allowed_outputs
        return ReportSchema(
            (
                Column("index", "int64", 0, self.dims - 1, width=self.k),
                Column(
                    "value",
                    "float64",
                    self.scale * low,
                    self.scale * high,
                    width=self.k,
                    allowed=None if allowed is None else tuple(self.scale * v for v in allowed),
                ),
            )
        )

    def _sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, k) attribute indices, k distinct ones per row, uniformly without replacement."""
        keys = rng.random((n, self.dims))
        if self.k == self.dims:
            return np.argsort(keys, axis=1)
        return np.argpartition(keys, self.k - 1, axis=1)[:, : self.k]

    def _perturb_sparse(self, values: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        t = check_unit_matrix(values, self.dims)
        index = self._sample_indices(t.shape[0], rng)
        chosen = np.take_along_axis(t, index, axis=1)
        reports = self.base.perturb_values(chosen.ravel(), rng).reshape(chosen.shape) * self.scale
        return index.astype(np.int64), reports

    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        index, value = self._perturb_sparse(values, rng)
        if self.k == 1:
            index, value = index[:, 0], value[:, 0]
        return {"index": index, "value": value}

    def perturb_dense(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        index, value = self._perturb_sparse(values, rng)
        out = np.zeros((index.shape[0], self.dims))
        np.put_along_axis(out, index, value, axis=1)
        return out

    def dense(self, reports: Reports) -> np.ndarray:
        index = np.asarray(reports["index"], dtype=np.int64).reshape(-1, self.k)
        value = np.asarray(reports["value"], dtype=np.float64).reshape(-1, self.k)
        out = np.zeros((index.shape[0], self.dims))
        np.put_along_axis(out, index, value, axis=1)
        return out


class SplitBudgetVectorMechanism(VectorMechanism):
    """The budget-splitting baseline: every attribute perturbed by a 1-D mechanism at eps / d (000 Sec. IV)."""

    def __init__(self, name: str, epsilon: float, dims: int) -> None:
        self.name = name  # type: ignore[misc]
        self.epsilon = check_epsilon(epsilon)
        self.dims = check_dims(dims)
        self.base = registry.numeric_class(name)(self.epsilon / self.dims)

    def variance_coefficients(self) -> tuple[float, float]:
        return self.base.variance_coefficients()

    @property
    def schema(self) -> ReportSchema:
        low, high = self.base.output_range
        return ReportSchema(
            (Column("value", "float64", low, high, width=self.dims, allowed=self.base.allowed_outputs),)
        )

    def perturb_dense(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        t = check_unit_matrix(values, self.dims)
        return self.base.perturb_values(t.ravel(), rng).reshape(t.shape)

    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        return {"value": self._rows(self.perturb_dense(values, rng))}

    def _rows(self, x: np.ndarray) -> np.ndarray:
        return x[:, 0] if self.dims == 1 else x

    def dense(self, reports: Reports) -> np.ndarray:
        return np.asarray(reports["value"], dtype=np.float64).reshape(-1, self.dims)


class DuchiVector(VectorMechanism):
    """Duchi et al.'s d-dimensional mechanism (000 Alg. 3) with 001 Sec. 3.1's fix; reports in {-B_d, B_d}^d.

    The output z in {-1, 1}^d is drawn given v by its number of agreements a with v: P[a] = binom(d, a) w[a]
    (`agreement_weights`), then the a agreeing coordinates are a uniform a-subset.

    Examples
    --------
    >>> import numpy as np
    >>> mech = DuchiVector(1.0, 2)
    >>> z = mech.perturb_dense(np.array([[0.5, -0.5]]), np.random.default_rng(3))
    >>> bool(np.all(np.isclose(np.abs(z), mech.bound)))
    True
    """

    name: ClassVar[str] = "duchi"

    def __init__(self, epsilon: float, dims: int) -> None:
        self.epsilon = check_numeric_epsilon(epsilon)
        self.dims = check_dims(dims)
        if self.dims > MAX_DUCHI_DIMS:
            raise LDPError(f"Duchi et al.'s d-dimensional mechanism takes d <= {MAX_DUCHI_DIMS} (its exact agreement "
                           f"weights are divided by 2^d, which float64 holds up to 2^1023); got d = {self.dims}")
        self.weights = self.agreement_weights()
        counts = np.array([math.comb(self.dims, a) for a in range(self.dims + 1)], dtype=np.float64)
        self._agreement_cdf = np.cumsum(counts * self.weights)
        self.bound = self.output_bound()

    def agreement_weights(self) -> np.ndarray:
        """w[a] = P[z | v] for a z that agrees with v in a coordinates (001 Sec. 3.1's fix)."""
        return agreement_weights(self.epsilon, self.dims)

    def output_bound(self) -> float:
        """B_d, the magnitude of every reported coordinate (001 Eq. 2; 000 Eq. 9-10 for odd d)."""
        return duchi_bound(self.epsilon, self.dims)

    def variance_coefficients(self) -> tuple[float, float]:
        return self.bound**2, -1.0  # E[(B z_j)^2] = B^2 (000 Eq. 13 with C_d folded into B)

    @property
    def schema(self) -> ReportSchema:
        b = self.bound
        return ReportSchema((Column("value", "float64", -b, b, width=self.dims, allowed=(-b, b)),))

    def perturb_dense(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        t = check_unit_matrix(values, self.dims)
        n, d = t.shape
        v = np.where(rng.random((n, d)) < (1 + t) / 2, 1.0, -1.0)  # 000 Alg. 3, line 1
        u = rng.random(n) * self._agreement_cdf[-1]
        agreements = np.minimum(np.searchsorted(self._agreement_cdf, u, side="right"), d)
        ranks = np.argsort(np.argsort(rng.random((n, d)), axis=1), axis=1)  # a uniform random order per row
        z = np.where(ranks < agreements[:, None], v, -v)
        return self.bound * z

    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        x = self.perturb_dense(values, rng)
        return {"value": x[:, 0] if self.dims == 1 else x}

    def dense(self, reports: Reports) -> np.ndarray:
        return np.asarray(reports["value"], dtype=np.float64).reshape(-1, self.dims)


def make_vector_mechanism(name: str, epsilon: float, dims: int, k: int | None = None) -> VectorMechanism:
    """The d-dimensional mechanism `name` (module docstring) at total budget eps; `k` only for the "sample" scheme."""
    if name not in vector_names():
        raise LDPError(f"unknown vector mechanism {name!r}; known: {list(vector_names())}")
    scheme = registry.numeric_class(name).vector_scheme
    if k is not None and scheme != "sample":
        raise LDPError(f'k applies to the "sample" scheme, not to {name!r} ("{scheme}")')
    if scheme == "duchi":
        return DuchiVector(epsilon, dims)
    if scheme == "split":
        return SplitBudgetVectorMechanism(name, epsilon, dims)
    return SampledVectorMechanism(name, epsilon, dims, k=1 if scheme == "sample_one" else k)
