"""Hadamard response: Bassily-Smith's one-bit protocol with Harmony's orthogonal matrix (001 Sec. 3.2, Alg. 3 and 5).

The K codes are padded to m = 2^ceil(log2 K) and column v of the m x m Sylvester-Hadamard matrix,
H[s, v] = (-1)^popcount(s & v), encodes v (001 Alg. 5 builds the same set of +-1 vectors, Lemma 5: orthogonal).
A user draws a row s uniformly from [m] and reports (s, b), where b is H[s, v] kept with probability
p = e^eps / (e^eps + 1) and negated otherwise (001 Alg. 3, lines 4-6, with Phi = H / sqrt(m)).
A report is stored as a row index and one bit (bit = 1 for +1).

Estimator (001 Alg. 3, lines 8-10): f_hat(l) = c_eps / n * sum_j H[s_j, l] b_j with c_eps = (e^eps + 1)/(e^eps - 1);
E[f_hat(l)] = 1{l = v} by orthogonality. This is the pure estimator with Support((s, b)) = {v : H[s, v] = b},
p* = p and q* = 1/2 (for u != v, H[s, u] = H[s, v] on exactly half the rows), since
1{l in Support} = (1 + H[s, l] b) / 2; so n * Var[f_hat] = (e^eps + 1)^2 / (e^eps - 1)^2 for a rare value, the
variance of BLH (004 Table 1). Aggregation: per row s the sum of the signed bits, then one fast Walsh-Hadamard
transform of that m-vector gives sum_j H[s_j, l] b_j for every l at once (O(n + m log m)).

Privacy (001 Alg. 3): s is independent of v, and given s the bit is randomized response on H[s, v], so
Pr[(s, b) | v] / Pr[(s, b) | v'] <= p / (1 - p) = e^eps.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import FrequencyOracle


def hadamard_bit(rows: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """1 where H[s, v] = +1, 0 where it is -1, i.e. 1 - parity(s & v) (broadcasting, codes and rows < 2^32)."""
    x = np.bitwise_and(np.asarray(rows, dtype=np.uint64), np.asarray(codes, dtype=np.uint64))
    for shift in (16, 8, 4, 2, 1):  # fold the 32 low bits onto bit 0: x & 1 becomes the parity
        x ^= x >> np.uint64(shift)
    return (1 - (x & np.uint64(1))).astype(np.uint8)


def walsh_hadamard_transform(x: np.ndarray) -> np.ndarray:
    """H @ x for the Sylvester-Hadamard matrix of size len(x) (a power of 2), in log2(len(x)) vectorised passes."""
    y = np.array(x, dtype=np.float64)
    m = y.shape[0]
    half = 1
    while half < m:
        pairs = y.reshape(-1, 2, half)  # [first half, second half] of every block of size 2 * half
        y = np.stack((pairs[:, 0] + pairs[:, 1], pairs[:, 0] - pairs[:, 1]), axis=1).reshape(m)
        half *= 2
    return y


class HadamardResponse(FrequencyOracle):
    """Hadamard response over K codes padded to m = 2^ceil(log2 K): reports {"row": uint32, "bit": uint8}.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = HadamardResponse(1.0, 5)
    >>> oracle.rows
    8
    >>> reports = oracle.perturb(np.array([0, 4, 4]), np.random.default_rng(3))
    >>> sorted(reports), int(oracle.accumulate(reports)[-1])
    (['bit', 'row'], 3)
    >>> round(oracle.worst_case_variance(), 4)  # (e + 1)^2 / (e - 1)^2
    4.6827
    """

    name: ClassVar[str] = "hadamard"
    auto_rank: ClassVar[int] = 20  # aggregation: one bincount and one transform

    @property
    def rows(self) -> int:
        """m: the padded domain size, the next power of 2 >= K."""
        return 1 << (self.domain_size - 1).bit_length()

    @property
    def p(self) -> float:
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + 1)  # 001 Alg. 3, line 5

    @property
    def q(self) -> float:
        return 0.5  # orthogonal columns: half of the rows agree on any two codes

    @property
    def report_bits(self) -> int:
        return (self.rows - 1).bit_length() + 1

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("row", "uint32", 0, self.rows - 1), Column("bit", "uint8", 0, 1)))

    def _sample(self, codes: np.ndarray, rng: np.random.Generator) -> Reports:
        rows = rng.integers(0, self.rows, size=codes.shape, dtype=np.uint32)
        truth = hadamard_bit(rows, codes)
        flip = (rng.random(size=codes.shape) >= self.p).astype(np.uint8)
        return {"row": rows, "bit": truth ^ flip}

    def _support_counts(self, reports: Reports) -> np.ndarray:
        signs = 2.0 * np.asarray(reports["bit"], dtype=np.float64) - 1.0
        per_row = np.bincount(np.asarray(reports["row"], dtype=np.intp), weights=signs, minlength=self.rows)
        agreement = walsh_hadamard_transform(per_row)[: self.domain_size]  # sum_j H[s_j, l] b_j
        return (signs.shape[0] + agreement) / 2  # sum_j 1{l in Support(y_j)}, exact integers in float64

    def _support_matrix(self, reports: Reports) -> np.ndarray:
        bits = hadamard_bit(np.asarray(reports["row"])[:, None], np.arange(self.domain_size))
        return bits == np.asarray(reports["bit"])[:, None]

    def _log_pmf(self, reports: Reports, codes: np.ndarray) -> np.ndarray:
        same = hadamard_bit(np.asarray(reports["row"])[:, None], codes) == np.asarray(reports["bit"])[:, None]
        return -math.log(self.rows) + np.where(same, math.log(self.p), math.log(1 - self.p))
