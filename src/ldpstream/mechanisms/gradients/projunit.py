"""FastProjUnit (Asi, Feldman, Nelson, Nguyen and Talwar, "Fast optimal locally private mean estimation via random
projections", NeurIPS 2023, "AFNNT23", algorithm FastProjUnit): PrivUnitG in k dimensions after a seeded
randomized Hadamard projection, so that a report is k float32 numbers and a seed whatever d is.

Construction. d' is d rounded up to a power of two, k <= d' (1000 by default), x is padded with zeros to R^d'.
Each report draws a 63-bit seed s from the device's generator; s alone fixes W = sqrt(d'/k) S H D: D the diagonal of
d' random signs, H the orthonormal Sylvester-Hadamard matrix, S the selection of k of the d' rows (a uniform
k-subset), all read off SplitMix64 streams of s (`ldpstream.mechanisms.hashing.mix64`), so the server rebuilds W
from the report. The device takes v = `round_to_sphere(x)`, y = W v, sends (s, R_k(y / ||y||)) with R_k the
k-dimensional PrivUnitG (`ldpstream.mechanisms.gradients.privunit`); the server decodes x_hat = P_d W^T u (P_d keeps
the first d coordinates). Rounding u to float32 moves it by a relative 2^-24, far below the noise.

Privacy. s is drawn independently of x, and for every s, R_k is eps-LDP on unit vectors of R^k; the density of
(s, u) is f(s) f_k(u | y / ||y||), whose ratio between two inputs is at most e^eps.

Bias. W W^T = (d'/k) I_k and E[W^T W] = I (E[S^T S] = (k/d') I), so E[x_hat] = E[P_d W^T W v / ||W v||] = x
exactly when ||W v|| = 1, which holds for k = d' (then W is a rotation: no bias at all, e.g. every d <= 1000 at
the default k). For k < d' the normalisation leaves a bias ||E[x_hat] - x|| <= sqrt(d'/k) E|1 - ||W v||| <=
sqrt(3 (d'-k) / (k (d'-1))) (||W^T w|| = sqrt(d'/k) ||w||; Var ||W v||^2 <= 3 (d'-k) / (k (d'-1)) for S sampled
without replacement from the y_i^2 of mean 1/d', E y_i^4 <= 3/d'^2 over D); AFNNT23 normalise the same way. At
k = 1000, d = 10^5 that is under 0.056, below the noise of a mean of n reports (sqrt(MSE / n) ~ 200 / sqrt(n)) for
any n under ~10^7.

Error (derived here; AFNNT23 bound it). With R_k's scale m and E[alpha^2] (module privunit):
E[u u^T | y] = (1/m^2) (I_k + (E[alpha^2] - 1) w w^T), w = y / ||y||, so with A = W P_d W^T,
    E||x_hat||^2 = (1/m^2) (tr A + (E[alpha^2] - 1) E[w^T A w]),   tr A = tr(P_d W^T W) = d exactly,
and E<x_hat, x> = E[<w, W x>] = E||W x||. Hence, for a unit x,
    MSE = (d + (E[alpha^2] - 1) c) / m^2 - 2 E||W x|| + 1,   c = E||P_d W^T w||^2 in [1, d'/k].
We state it with E||W x|| = 1 (its deficit is at most Var||W x||^2 / 2 <= 1.5 / k) and
c = 1 + (d'/k - 1)(d - 1)/(d' - 1), the value when the part of W^T W x orthogonal to x, of squared norm d'/k - 1 on
average, spreads evenly over the d' - 1 directions orthogonal to x (exact at k = d' and at d = d'); `mse_slack` is
the most these two approximations can move the closed form (the tests add it to their tolerance). With
c << d the error is PrivUnitG's in d dimensions plus (c - 1)(E[alpha^2] - 1)/m^2, under 1% at k = 1000.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.gradients.base import (
    CHUNK_ELEMENTS,
    GradientMechanism,
    Norm,
    bytes_of,
    round_to_sphere,
    unit_rows,
)
from ldpstream.mechanisms.gradients.privunit import PrivUnitG
from ldpstream.mechanisms.gradients.wire import float_column, seed_column
from ldpstream.mechanisms.hashing import mix64_inplace
from ldpstream.mechanisms.multidim import check_dims

PROJECTED_DIMS = 1000  # AFNNT23's k in their experiments: a 4,008-byte report
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_SEED_HIGH = np.iinfo(np.int64).max
_BLOCK = 64  # the Hadamard transform's low Kronecker factor, applied as a matrix product


def padded_dims(dims: int) -> int:
    """d rounded up to a power of two (the Hadamard transform's length)."""
    return 1 << (dims - 1).bit_length()


@lru_cache(maxsize=8)
def _sylvester(size: int) -> np.ndarray:
    """The unnormalised size x size Sylvester-Hadamard matrix of +-1 (size a power of two)."""
    h = np.ones((1, 1))
    while h.shape[0] < size:
        h = np.block([[h, h], [h, -h]])
    return h


def hadamard(x: np.ndarray) -> np.ndarray:
    """H x for each row of x (n, m), m a power of two, H the orthonormal Sylvester-Hadamard matrix (symmetric, so
    also H^T x). H_m = H_{m/B} (x) H_B: the low factor is one matrix product per block of B = min(m, 64) entries,
    the high one the butterflies of the fast Walsh-Hadamard transform over contiguous halves. x is overwritten."""
    n, m = x.shape
    block = min(m, _BLOCK)
    x = (x.reshape(n * (m // block), block) @ _sylvester(block)).reshape(n, m)
    h = block
    while h < m:
        y = x.reshape(n, m // (2 * h), 2, h)
        top = y[:, :, 0, :].copy()
        y[:, :, 0, :] += y[:, :, 1, :]
        y[:, :, 1, :] *= -1.0
        y[:, :, 1, :] += top
        h *= 2
    x *= 1.0 / math.sqrt(m)
    return x


def seed_stream(seeds: np.ndarray, count: int) -> np.ndarray:
    """(n, count) uint64 words: SplitMix64's outputs mix64(s + (j + 1) * golden), j < count, for each seed s."""
    state = seeds.astype(np.uint64)[:, None] + (np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN)[None, :]
    return mix64_inplace(state)


class ProjUnit(GradientMechanism):
    """FastProjUnit (AFNNT23): a seeded randomized Hadamard projection to k dimensions, then PrivUnitG.

    Examples
    --------
    >>> m = ProjUnit(dims=100_000, epsilon=8.0)
    >>> m.k, m.report_bytes()
    (1000, 4008)
    >>> x = np.zeros((2, 100_000)); x[:, 7] = 1.0
    >>> r = m.perturb(x, np.random.default_rng(0))
    >>> r["value"].dtype, m.decode(r).shape
    (dtype('float32'), (2, 100000))
    """

    name: ClassVar[str] = "projunit"
    norm: ClassVar[Norm] = "l2"

    def __init__(self, dims: int, epsilon: float, k: int | None = None) -> None:
        super().__init__(dims, epsilon)
        self.requested_k = PROJECTED_DIMS if k is None else check_dims(k)
        self.padded = padded_dims(self.dims)
        self.k = min(self.requested_k, self.padded)
        self.inner = PrivUnitG(dims=self.k, epsilon=self.epsilon)

    def parameters(self) -> dict[str, Any]:
        return {"k": self.requested_k}

    def report_bytes(self) -> int:
        return bytes_of(("int64", 1), ("float32", self.k))

    def decode_width(self) -> int:
        return self.padded

    def spread(self) -> float:
        """c = 1 + (d'/k - 1)(d - 1)/(d' - 1), the approximation of E||P_d W^T w||^2 (module docstring)."""
        if self.padded == 1:
            return 1.0
        return 1.0 + (self.padded / self.k - 1.0) * (self.dims - 1) / (self.padded - 1)

    def unit_mse(self) -> float:
        cap = self.inner.cap
        return (self.dims + (cap.second_moment - 1.0) * self.spread()) / cap.scale**2 - 1.0

    def mse_slack(self) -> float:
        """The most the true unit-vector MSE can differ from `unit_mse` (c in [1, d'/k], E||W x|| in [1 - 1.5/k, 1])."""
        cap = self.inner.cap
        c = self.spread()
        return abs(cap.second_moment - 1.0) / cap.scale**2 * max(c - 1.0, self.padded / self.k - c) + 3.0 / self.k

    def bias_bound(self) -> float:
        """sqrt(3 (d' - k) / (k (d' - 1))): the normalisation's bias (module docstring); 0 when k = d'."""
        if self.k == self.padded:
            return 0.0
        return math.sqrt(3.0 * (self.padded - self.k) / (self.k * (self.padded - 1)))

    def projection(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(signs (n, d') in {-1, 1}, rows (n, k)): D and S of W for each report's seed, defined bit for bit so that
        any implementation rebuilds them: with w_j = mix64(s + (j + 1) * golden) (`seed_stream`), D_j = -1 iff bit
        j mod 64 (least significant first) of w_{j // 64} is set, j < d'; S lists in increasing order the k indices
        i < d' with the smallest w_{ceil(d'/64) + i} (all of them when k = d'); report value i goes with row S_i."""
        n, m, k = seeds.shape[0], self.padded, self.k
        sign_words = -(-m // 64)
        words = seed_stream(seeds, sign_words + (0 if k == m else m))
        j = np.arange(m, dtype=np.uint64)
        bits = (words[:, j // np.uint64(64)] >> (j % np.uint64(64))) & np.uint64(1)
        signs = 1.0 - 2.0 * bits.astype(np.float64)
        if k == m:
            return signs, np.broadcast_to(np.arange(m), (n, m))
        return signs, np.sort(np.argpartition(words[:, sign_words:], k - 1, axis=1)[:, :k], axis=1)

    def project(self, v: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """W v for unit rows v (n, d): (n, k)."""
        signs, rows = self.projection(seeds)
        y = np.zeros((v.shape[0], self.padded))
        y[:, : self.dims] = v
        y *= signs
        return np.take_along_axis(hadamard(y), rows, axis=1) * math.sqrt(self.padded / self.k)

    def perturb(self, gradients: np.ndarray, rng: np.random.Generator) -> Reports:
        x = self.check(gradients)
        n: int = x.shape[0]
        seeds = rng.integers(0, _SEED_HIGH, size=n, dtype=np.int64)
        value = np.empty((n, self.k), dtype=np.float32)
        step = max(1, CHUNK_ELEMENTS // self.padded)
        for start in range(0, n, step):  # chunks of rows bound the (rows, d') scratch of the transform
            part = slice(start, start + step)
            y = self.project(round_to_sphere(x[part], rng), seeds[part])
            value[part] = self.inner.privatize(unit_rows(y), rng)
        return {"seed": seeds, "value": value}

    def decode(self, reports: Reports) -> np.ndarray:
        seeds = seed_column(reports, "seed")
        u = float_column(reports, "value", self.k)
        if u.shape[0] != seeds.shape[0]:
            raise LDPError(f"projunit reports: {seeds.shape[0]} seeds but {u.shape[0]} values")
        signs, rows = self.projection(seeds)
        z = np.zeros((u.shape[0], self.padded))
        np.put_along_axis(z, np.ascontiguousarray(rows), u, axis=1)
        z = hadamard(z)
        z *= signs
        return z[:, : self.dims] * math.sqrt(self.padded / self.k)
