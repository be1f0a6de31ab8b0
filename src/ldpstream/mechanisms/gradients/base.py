"""The contract of a gradient randomizer: one clipped vector per device in, an unbiased d-vector out on average.

A `GradientMechanism` perturbs an (n, d) batch of clipped gradients into a report batch (a dict of numpy columns,
one row per device, as every mechanism of `ldpstream.mechanisms`), decodes reports into their unbiased (n, d)
vectors, averages them (`mean`), and states its closed-form per-report error E||x_hat - x||^2 for a unit vector
(`mse`). `norm` says which clipping it expects: "l2" (rows in the unit L2 ball) or "linf" (rows in [-1, 1]^d).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.multidim import check_dims, check_unit_matrix
from ldpstream.mechanisms.numeric.base import check_numeric_epsilon

Norm = Literal["l2", "linf"]
# Rows whose L2 norm exceeds 1 by at most this much are taken as clipped (x / max(1, ||x||) rounds that far).
L2_SLACK = 1e-9
# Rows decoded at a time: bounds the (rows, d) scratch arrays of a decode or a projection to ~64 MB of float64.
CHUNK_ELEMENTS = 1 << 23


class GradientMechanism(ABC):
    """An eps-LDP randomizer of one clipped d-dimensional vector per device, with unbiased decoded reports."""

    name: ClassVar[str]
    norm: ClassVar[Norm]
    epsilon: float
    dims: int

    def __init__(self, dims: int, epsilon: float) -> None:
        self.dims = check_dims(dims)
        self.epsilon = check_numeric_epsilon(epsilon)

    @abstractmethod
    def perturb(self, gradients: np.ndarray, rng: np.random.Generator) -> Reports:
        """The reports of n devices for their clipped gradients, an (n, d) array (one row per device)."""

    @abstractmethod
    def decode(self, reports: Reports) -> np.ndarray:
        """The (n, d) unbiased vectors a report batch stands for."""

    @abstractmethod
    def unit_mse(self) -> float:
        """Closed-form E||x_hat - x||^2 of one report for a unit-norm x (module docstrings derive each)."""

    @abstractmethod
    def report_bytes(self) -> int:
        """The size of one device's report on the wire (its columns' itemsizes times widths)."""

    def bias_bound(self) -> float:
        """An upper bound on ||E[x_hat] - x|| over inputs (0: unbiased)."""
        return 0.0

    def parameters(self) -> dict[str, Any]:
        """The keyword arguments beyond dims and epsilon that rebuild this mechanism."""
        return {}

    def rows(self, reports: Reports) -> int:
        """The number of reports in a batch."""
        return len(next(iter(reports.values())))

    def mean(self, reports: Reports) -> np.ndarray:
        """The unbiased (d,) estimate of the mean of the devices' vectors (decoded in chunks of rows)."""
        n = self.rows(reports)
        if n == 0:
            raise LDPError("no reports to average")
        return self.total(reports) / n

    def total(self, reports: Reports) -> np.ndarray:
        """The sum of the decoded (n, d) vectors, an additive statistic (the total of a union is the sum of totals)."""
        n = self.rows(reports)
        step = max(1, CHUNK_ELEMENTS // max(self.decode_width(), 1))
        out = np.zeros(self.dims)
        for start in range(0, n, step):
            out += self.decode({key: col[start : start + step] for key, col in reports.items()}).sum(axis=0)
        return out

    def decode_width(self) -> int:
        """The width of the scratch rows a decode allocates (d, or the padded dimension of a projection)."""
        return self.dims

    def mse(self, dims: int | None = None) -> float:
        """Closed-form per-report E||x_hat - x||^2 for a unit vector, at `dims` (default: this mechanism's d)."""
        if dims is None or dims == self.dims:
            return self.unit_mse()
        return type(self)(dims=dims, epsilon=self.epsilon, **self.parameters()).unit_mse()  # type: ignore[call-arg]

    def check(self, gradients: np.ndarray) -> np.ndarray:
        """The clipped gradients as float64 (n, d): in the unit L2 ball ("l2") or in [-1, 1]^d ("linf")."""
        if self.norm == "linf":
            return check_unit_matrix(gradients, self.dims)
        return check_l2_matrix(gradients, self.dims)

    def __repr__(self) -> str:
        extra = "".join(f", {key}={value!r}" for key, value in self.parameters().items())
        return f"{type(self).__name__}(dims={self.dims}, epsilon={self.epsilon:g}{extra})"


def check_l2_matrix(values: np.ndarray, dims: int) -> np.ndarray:
    """Rows of L2 norm at most 1 as float64 (n, d); LDPError for NaN, infinities, a wrong shape or a longer row."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LDPError(f"gradients must be numbers: {exc}") from exc
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != dims:
        raise LDPError(f"expected gradients of dimension {dims}, got shape {np.shape(values)}")
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    if norms.size and not norms.max() <= 1.0 + L2_SLACK:  # NaN compares false
        if not np.isfinite(x).all():
            raise LDPError("gradients contain NaN or infinities")
        raise LDPError(f"gradients must be clipped to L2 norm 1; the longest row has norm {norms.max():.6g}")
    return x


def round_to_sphere(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit rows v with E[v] = x for rows x of norm r <= 1: v = +-x/r with P[+] = (1 + r)/2 (Duchi, Jordan and
    Wainwright 2018, the first step of their L2 mechanism); a zero row gets a uniform direction
    (+-v with equal odds, so its mean is 0 too). A randomizer R that is eps-LDP on unit vectors stays so on the
    ball: the density of R(v) given x is a mixture over v, so f(u | x) <= max_v f(u | v) <= e^eps min_v f(u | v)
    <= e^eps f(u | x')."""
    n, d = x.shape
    r = np.sqrt(np.einsum("ij,ij->i", x, x))
    zero = r == 0.0
    direction = np.array(x, dtype=np.float64)
    if zero.any():
        direction[zero] = rng.standard_normal((int(zero.sum()), d))
        r_dir = np.linalg.norm(direction[zero], axis=1)
        direction[zero] /= np.where(r_dir > 0, r_dir, 1.0)[:, None]
    direction[~zero] /= r[~zero, None]
    sign = np.where(rng.random(n) < (1.0 + np.minimum(r, 1.0)) / 2.0, 1.0, -1.0)
    return direction * sign[:, None]


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1 (a zero row becomes e_1: the caller documents the bias of that event)."""
    r = np.linalg.norm(x, axis=1)
    out = x / np.where(r > 0, r, 1.0)[:, None]
    out[r == 0, 0] = 1.0
    return out


def orthogonal_part(g: np.ndarray, v: np.ndarray) -> np.ndarray:
    """g - <g, v> v per row (v unit rows): the component of g orthogonal to v."""
    return g - np.einsum("ij,ij->i", g, v)[:, None] * v


def bytes_of(*columns: tuple[str, int]) -> int:
    """Wire size of one report from (dtype, width) pairs."""
    return sum(np.dtype(dtype).itemsize * width for dtype, width in columns)

