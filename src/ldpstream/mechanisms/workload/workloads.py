"""Query workloads: a matrix W (p x n) of linear counting queries over a domain of n user types.

The analyst wants W x, x the data vector of counts per type (McKenna et al., Sec. 2.1). Every variance formula of the
factorization mechanism sees W only through its Gram matrix W^T W (n x n) and its number of rows p, so a `Workload`
carries the Gram matrix (closed form for the built-in workloads) and builds the p x n matrix only when asked: the
All Range matrix has n(n+1)/2 rows.

Binary-attribute workloads (marginals, parity) live on n = 2^k types; type u has attribute i equal to bit i of u.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.names import WORKLOAD_NAMES


@dataclass(frozen=True, eq=False)
class Workload:
    """A workload of `num_queries` linear queries over `n` types: its Gram matrix W^T W and, on demand, W itself."""

    name: str
    n: int
    num_queries: int
    gram: np.ndarray
    build_matrix: Callable[[], np.ndarray] = field(repr=False)

    def matrix(self) -> np.ndarray:
        """The p x n query matrix W (row i: the coefficient of every type in query i)."""
        return self.build_matrix()

    @property
    def frobenius_squared(self) -> float:
        """||W||_F^2 = trace(W^T W)."""
        return float(np.trace(self.gram))

    def singular_values(self) -> np.ndarray:
        """The non-zero singular values of W (square roots of the eigenvalues of W^T W), largest first."""
        eig = np.linalg.eigvalsh(self.gram)[::-1]
        return np.sqrt(eig[eig > 1e-10 * max(float(eig[0]), 1e-300)])

    @classmethod
    def from_matrix(cls, matrix: np.ndarray, name: str = "custom") -> Workload:
        """A user-defined workload from its p x n query matrix (finite entries, no all-zero workload)."""
        w = np.array(matrix, dtype=np.float64, copy=True)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or w.shape[0] < 1 or w.shape[1] < 2:
            raise LDPError(f"a workload matrix must be 2-D with >= 1 query and >= 2 types, got shape {w.shape}")
        if not np.isfinite(w).all():
            raise LDPError("the workload matrix has non-finite entries")
        if not w.any():
            raise LDPError("the workload matrix is all zeros")
        w.setflags(write=False)
        return cls(name, w.shape[1], w.shape[0], w.T @ w, lambda: w)


def _check_domain(n: int) -> int:
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise LDPError(f"domain size must be an integer >= 2, got {n!r}")
    return int(n)


def _attributes(n: int, name: str) -> int:
    """k for a domain of n = 2^k types (binary-attribute workloads)."""
    n = _check_domain(n)
    if n & (n - 1):
        raise LDPError(f"{name} needs a domain of 2^k types (k binary attributes), got n = {n}")
    return n.bit_length() - 1


def popcount(a: np.ndarray) -> np.ndarray:
    """Number of set bits of every entry of a non-negative integer array."""
    a = np.asarray(a, dtype=np.int64)
    count = np.zeros(a.shape, dtype=np.int64)
    for bit in range(max(int(a.max(initial=0)).bit_length(), 1)):
        count += (a >> bit) & 1
    return count


def _hamming(n: int) -> np.ndarray:
    """Hamming distance between the bit patterns of every pair of types (n x n)."""
    u = np.arange(n)
    return popcount(u[:, None] ^ u[None, :])


def histogram(n: int) -> Workload:
    """Histogram: W = I, the count of every type."""
    n = _check_domain(n)
    return Workload("histogram", n, n, np.eye(n), lambda: np.eye(n))


def prefix(n: int) -> Workload:
    """Prefix: row i counts types 0..i (lower-triangular ones), the unnormalised empirical CDF."""
    n = _check_domain(n)
    u = np.arange(n)
    # (W^T W)[a, b] = #{i : i >= max(a, b)}
    gram = (n - np.maximum(u[:, None], u[None, :])).astype(np.float64)
    return Workload("prefix", n, n, gram, lambda: np.tril(np.ones((n, n))))


def range_queries(ranges: Sequence[tuple[int, int]], n: int, name: str = "ranges") -> Workload:
    """One counting query per inclusive range [lo, hi] of types (a discretised numeric attribute)."""
    n = _check_domain(n)
    bounds = np.asarray(ranges, dtype=np.int64)
    if bounds.ndim != 2 or bounds.shape[1] != 2 or len(bounds) == 0:
        raise LDPError("ranges must be a non-empty list of (lo, hi) pairs")
    lo, hi = bounds[:, 0], bounds[:, 1]
    if (lo < 0).any() or (hi >= n).any() or (lo > hi).any():
        raise LDPError(f"every range needs 0 <= lo <= hi < {n}")
    u = np.arange(n)
    return Workload.from_matrix(((u >= lo[:, None]) & (u <= hi[:, None])).astype(np.float64), name)


def all_range(n: int) -> Workload:
    """All Range: one query per interval [i, j], 0 <= i <= j < n (p = n(n+1)/2)."""
    n = _check_domain(n)
    u = np.arange(n)
    # (W^T W)[a, b] = #{[i, j] : i <= min(a, b), j >= max(a, b)} = (min + 1)(n - max)
    gram = ((np.minimum(u[:, None], u[None, :]) + 1) * (n - np.maximum(u[:, None], u[None, :]))).astype(np.float64)

    def build() -> np.ndarray:
        lo, hi = np.triu_indices(n)
        return ((u >= lo[:, None]) & (u <= hi[:, None])).astype(np.float64)

    return Workload("all_range", n, n * (n + 1) // 2, gram, build)


def _marginal_rows(n: int, subsets: np.ndarray) -> np.ndarray:
    """Rows of the marginal tables over the given attribute subsets (bit masks): one row per (subset, cell)."""
    cells = np.arange(n)
    s, a = np.meshgrid(subsets, cells, indexing="ij")
    keep = (a & ~s) == 0  # cell a is an assignment of the attributes in s
    s, a = s[keep], a[keep]
    u = np.arange(n)
    return ((u[None, :] & s[:, None]) == a[:, None]).astype(np.float64)


def marginals(n: int, order: int | None = None) -> Workload:
    """All marginal tables over k binary attributes (order None), or all `order`-way marginal tables.

    Row (S, a) counts the users whose attributes in S take the values a; the 2^|S| cells of S partition the users.
    """
    k = _attributes(n, "a marginal workload")
    if order is not None and not 0 <= order <= k:
        raise LDPError(f"{order}-way marginals need {order} binary attributes (n >= {2**order}), got n = {n}")
    masks = np.arange(n)
    subsets = masks if order is None else masks[popcount(masks) == order]
    hamming = _hamming(n)
    # (W^T W)[u, v] = #{S : u, v agree on S} = 2^(k - d(u, v)) (all) or C(k - d(u, v), order)
    if order is None:
        gram, name, p = 2.0 ** (k - hamming), "all_marginals", 3**k
    else:
        gram = np.array([math.comb(k - d, order) for d in range(k + 1)], dtype=np.float64)[hamming]
        name, p = f"{order}way_marginals", math.comb(k, order) * 2**order
    return Workload(name, n, p, gram, lambda: _marginal_rows(n, subsets))


def sylvester_hadamard(n: int) -> np.ndarray:
    """The n x n Sylvester-Hadamard matrix, H[s, u] = (-1)^popcount(s & u), n = 2^k."""
    u = np.arange(n)
    return 1.0 - 2.0 * (popcount(u[:, None] & u[None, :]) & 1)


def parity(n: int) -> Workload:
    """Parity: for every subset S of the k attributes, sum over users of (-1)^(parity of their bits in S).

    W is the Sylvester-Hadamard matrix (Gaboardi et al.'s parity queries as +-1 characters; S = {} is the total).
    """
    _attributes(n, "the parity workload")
    return Workload("parity", n, n, n * np.eye(n), lambda: sylvester_hadamard(n))


def predicate_queries(
    predicates: Sequence[Callable[[np.ndarray], np.ndarray]], labels: Sequence[object], name: str = "predicates"
) -> Workload:
    """One counting query per predicate over the labelled domain: predicate(labels) -> boolean mask of length n."""
    values = np.asarray(labels)
    n = _check_domain(len(values))
    if len(predicates) == 0:
        raise LDPError("need at least one predicate")
    rows = []
    for i, predicate in enumerate(predicates):
        mask = np.asarray(predicate(values))
        if mask.shape != (n,) or mask.dtype != np.bool_:
            raise LDPError(f"predicate {i} must return a boolean mask of shape ({n},), got {mask.dtype} {mask.shape}")
        rows.append(mask)
    return Workload.from_matrix(np.array(rows, dtype=np.float64), name)


def load_workload(path: str | Path, n: int | None = None) -> Workload:
    """A user-defined workload from a .npy or .csv matrix file (p x n); `n`, if given, must match its columns."""
    path = Path(path)
    try:
        if path.suffix == ".npy":
            matrix = np.load(path, allow_pickle=False)
        elif path.suffix == ".csv":
            matrix = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        else:
            raise LDPError(f"workload file must be .npy or .csv, got {path.name!r}")
    except (OSError, ValueError) as exc:
        if isinstance(exc, LDPError):
            raise
        raise LDPError(f"cannot read workload matrix {str(path)!r}: {exc}") from exc
    workload = Workload.from_matrix(matrix, path.stem)
    if n is not None and workload.n != n:
        raise LDPError(f"workload file {path.name!r} has {workload.n} columns, domain size is {n}")
    return workload


def workload_by_name(name: str, n: int) -> Workload:
    """A built-in workload by its CLI name (`WORKLOAD_NAMES`), or a .npy/.csv matrix file path, over n types."""
    builders: dict[str, Callable[[int], Workload]] = {
        "histogram": histogram,
        "prefix": prefix,
        "all_range": all_range,
        "all_marginals": marginals,
        "3way_marginals": lambda size: marginals(size, 3),
        "parity": parity,
    }
    if name in builders:
        return builders[name](n)
    if name.endswith((".npy", ".csv")):
        return load_workload(name, n)
    raise LDPError(f"unknown workload {name!r}; known: {list(WORKLOAD_NAMES)} or a .npy/.csv matrix file")
