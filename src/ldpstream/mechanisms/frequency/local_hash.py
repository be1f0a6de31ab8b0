"""Local hashing: binary (BLH, Bassily-Smith) and optimized (OLH, g = round(e^eps) + 1) (004 "Binary Local Hash",
"Optimized Local Hash"; 002).

Each user draws a hash function H from a universal family mapping codes to g buckets, computes x = H(v), and
reports (H, y) where y is x kept with probability p = e^eps / (e^eps + g - 1), or else one of the other g - 1
buckets uniformly (randomized response over [g]). Support((H, y)) = {v : H(v) = y}.

The hash family (integer codes in, no bytes or strings: the input is the code v itself, 0 <= v < K <= 2^20):

    H_{a,b}(v) = floor(g * ((a v + b) mod P) / P),    P = 2^24 - 3 = 16777213 (prime),

with a uniform in [1, P - 1] and b uniform in [0, P - 1], drawn per report and sent as two uint32 columns "a", "b"
(24 significant bits each: seed width 48 bits). The server recomputes H from (a, b) only, so no seed can wrap or be
truncated: a report whose a or b is outside its range is rejected, not reduced.

Exact support probabilities. For v != u, the map (a, b) -> ((a u + b) mod P, (a v + b) mod P) is a bijection onto
the pairs of distinct residues (P is prime and |u - v| < P), so the collision probability
c = Pr[H(u) = H(v)] = sum_h m_h (m_h - 1) / (P (P - 1)) is the same for every pair, where m_h is the number of
residues in bucket h (P mod g buckets hold ceil(P/g) residues, the others floor(P/g)). Given the collision or not, y
is independent of H(v), hence

    p* = p,    q* = Pr[y = H(v) | u] = p c + (1 - p) (1 - c) / (g - 1),

which is 1/g up to a relative O(g / P) (c would be 1/g for a perfectly uniform hash). The estimator and the
variance use these exact p* and q*; the client's p and the server's p, q* are one computation for the rounded g.
For OLH, p = e^eps / (e^eps + g - 1) at the rounded g (not 1/2), and the rare-value n * Var[f_hat] is
q* (1 - q*) / (p - q*)^2, which equals 4 e^eps / (e^eps - 1)^2 (004 Table 1) only when e^eps is an integer.

Privacy (004, BLH/OLH): (a, b) is drawn independently of v, and given (a, b) the report is randomized response on
H(v), so Pr[(a, b, y) | v] / Pr[(a, b, y) | v'] <= p / ((1 - p) / (g - 1)) = e^eps, whatever the hash family.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from fractions import Fraction
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, LDPError, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import MAX_DOMAIN_SIZE, FrequencyOracle, randomized_response

HASH_PRIME = (1 << 24) - 3  # P: prime, > MAX_DOMAIN_SIZE, and small enough for the exact float evaluation below
SEED_BITS = 24  # significant bits of each of a and b
# 1/P scaled up by (1 + 2^-47): every float quotient in `supported` then lies just above the exact one
_SCALED_INVERSE_PRIME = float(Fraction(1, HASH_PRIME) * (1 + Fraction(1, 1 << 47)))
_CHUNK_ENTRIES = 1 << 17  # hash evaluations per chunk of reports during aggregation (1 MiB of float64)


def hash_buckets(a: np.ndarray, b: np.ndarray, codes: np.ndarray, g: int, prime: int = HASH_PRIME) -> np.ndarray:
    """H_{a,b}(v) = floor(g ((a v + b) mod P) / P) in exact int64 arithmetic (broadcasting a, b against codes).

    Needs a, b < P and v < P; a v + b < P^2 and g P < 2^63 keep every product inside int64.
    """
    residues = (
        np.asarray(a, dtype=np.int64) * np.asarray(codes, dtype=np.int64) + np.asarray(b, dtype=np.int64)
    ) % prime
    return residues * g // prime


def bucket_starts(buckets: np.ndarray, g: int, prime: int = HASH_PRIME) -> np.ndarray:
    """The smallest residue r with floor(g r / P) = h, i.e. ceil(h P / g), for each bucket h (int64)."""
    return -((-np.asarray(buckets, dtype=np.int64) * prime) // g)


def collision_probability(g: int, prime: int = HASH_PRIME) -> Fraction:
    """Pr[H(u) = H(v)] for u != v over the family: sum_h m_h (m_h - 1) / (P (P - 1)) (module docstring)."""
    small, big_buckets = divmod(prime, g)  # big_buckets buckets of size small + 1, the rest of size small
    pairs = big_buckets * (small + 1) * small + (g - big_buckets) * small * (small - 1)
    return Fraction(pairs, prime * (prime - 1))


def other_support_probability(keep: float, g: int, prime: int = HASH_PRIME) -> float:
    """q* = p c + (1 - p)(1 - c) / (g - 1): Pr[a report of u supports v != u] (module docstring)."""
    c = collision_probability(g, prime)
    return float(keep * c + (1 - keep) * (1 - c) / (g - 1))


def supported(a: np.ndarray, b: np.ndarray, y: np.ndarray, codes: np.ndarray, g: int) -> np.ndarray:
    """(len(a), len(codes)) bool: H_{a_j,b_j}(v) == y_j, evaluated in float64 with exact results (for P = HASH_PRIME).

    Report j supports v iff ((a v + b) mod P) lies in bucket y's residues [lo, lo + w), i.e. iff
    ((a v + beta) mod P) < w with beta = (b - lo) mod P, i.e. iff frac((a v + beta) / P) < (w - 1/2) / P.
    With A = fl(a c), B = fl(beta c), c = fl((1 + 2^-47) / P), the float t = fl(fl(A v) + B) satisfies
    t = s (1 + 2^-47)(1 + theta), |theta| <= 4 * 2^-53, for s = (a v + beta) / P < K <= 2^20 (all terms are
    non-negative), hence s <= t < s + 2^-26. So floor(t) = floor(s), as frac(s) <= 1 - 1/P and 1/P > 2^-24, and
    t - floor(t) (exact) lies in [r/P, r/P + 2^-26) for the residue r, on the correct side of the threshold, whose
    distance to r/P is >= 1/(2P) > 2^-25. Without the 2^-47 the floor is one too low for about 1 in 8 reports whose
    residue is 0 (tested, with boundary-hitting seeds, against the integer `hash_buckets`).
    """
    lo = bucket_starts(y, g)
    width = bucket_starts(y + 1, g) - lo
    slope = a * _SCALED_INVERSE_PRIME
    offset = ((b - lo) % HASH_PRIME) * _SCALED_INVERSE_PRIME
    t = np.multiply.outer(slope, np.asarray(codes, dtype=np.float64))
    t += offset[:, None]
    t -= np.floor(t)
    return t < ((width - 0.5) / HASH_PRIME)[:, None]


def olh_buckets(epsilon: float) -> int:
    """g = round(e^eps) + 1 (004, OLH: the variance is smallest at g = e^eps + 1), rounding halves up."""
    return math.floor(math.exp(epsilon) + 0.5) + 1


class LocalHash(FrequencyOracle):
    """Local hashing into g buckets with randomized response on the bucket.

    A report is {"a": uint32 (n,), "b": uint32 (n,), "y": uint32 (n,)}: the hash seed and the perturbed bucket.
    """

    def __init__(self, epsilon: float, domain_size: int) -> None:
        super().__init__(epsilon, domain_size)
        self.g = self.buckets()
        if not 2 <= self.g < HASH_PRIME:
            raise LDPError(f"{type(self).__name__}: g = {self.g} buckets is outside [2, {HASH_PRIME}); lower epsilon")
        # Computed once from the rounded g, and used by perturb, the estimator and the variance alike.
        exp_eps = math.exp(self.epsilon)
        self._p = exp_eps / (exp_eps + self.g - 1)  # 004, BLH/OLH
        self._q = other_support_probability(self._p, self.g)

    @abstractmethod
    def buckets(self) -> int:
        """The number g of hash buckets."""

    @property
    def p(self) -> float:
        return self._p

    @property
    def q(self) -> float:
        return self._q

    @property
    def report_bits(self) -> int:
        return 2 * SEED_BITS + math.ceil(math.log2(self.g))

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema(
            (
                Column("a", "uint32", 1, HASH_PRIME - 1),
                Column("b", "uint32", 0, HASH_PRIME - 1),
                Column("y", "uint32", 0, self.g - 1),
            )
        )

    def _sample(self, codes: np.ndarray, rng: np.random.Generator) -> Reports:
        a = rng.integers(1, HASH_PRIME, size=codes.shape)
        b = rng.integers(0, HASH_PRIME, size=codes.shape)
        return {"a": a, "b": b, "y": randomized_response(hash_buckets(a, b, codes, self.g), self.g, self._p, rng)}

    def _support_counts(self, reports: Reports) -> np.ndarray:
        a, b, y = (np.asarray(reports[name], dtype=np.int64) for name in ("a", "b", "y"))
        values = np.arange(self.domain_size)
        counts = np.zeros(self.domain_size, dtype=np.int64)
        rows = max(1, _CHUNK_ENTRIES // self.domain_size)
        for start in range(0, a.shape[0], rows):  # vectorised over a chunk of reports x every value
            chunk = slice(start, start + rows)
            counts += np.count_nonzero(supported(a[chunk], b[chunk], y[chunk], values, self.g), axis=0)
        return counts

    def _support_matrix(self, reports: Reports) -> np.ndarray:
        a, b, y = (np.asarray(reports[name], dtype=np.int64) for name in ("a", "b", "y"))
        return supported(a, b, y, np.arange(self.domain_size), self.g)

    def _log_pmf(self, reports: Reports, codes: np.ndarray) -> np.ndarray:
        buckets = hash_buckets(np.asarray(reports["a"])[:, None], np.asarray(reports["b"])[:, None], codes, self.g)
        seed = -math.log(HASH_PRIME - 1) - math.log(HASH_PRIME)  # (a, b) uniform, independent of v
        same = buckets == np.asarray(reports["y"], dtype=np.int64)[:, None]
        return seed + np.where(same, math.log(self._p), math.log((1 - self._p) / (self.g - 1)))


class BLH(LocalHash):
    """Binary local hashing: g = 2 buckets (004, BLH); rare-value n * Var ~ (e^eps + 1)^2 / (e^eps - 1)^2.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = BLH(1.0, 16)
    >>> sorted(oracle.perturb(np.array([0, 15]), np.random.default_rng(0)))
    ['a', 'b', 'y']
    >>> round(oracle.worst_case_variance(), 4)  # (e + 1)^2 / (e - 1)^2
    4.6827
    """

    name: ClassVar[str] = "blh"
    auto_rank: ClassVar[int] = 60  # aggregation: a hash per report and value, after OLH's

    def buckets(self) -> int:
        return 2


class OLH(LocalHash):
    """Optimized local hashing: g = round(e^eps) + 1 buckets (004, OLH).

    Examples
    --------
    >>> import numpy as np
    >>> oracle = OLH(1.0, 1024)
    >>> oracle.g, round(oracle.p, 4)  # g = round(e) + 1 = 4, p = e / (e + 3)
    (4, 0.4754)
    >>> round(oracle.worst_case_variance(), 4)  # vs 4 e / (e - 1)^2 = 3.6827 for the unrounded g
    3.6917
    """

    name: ClassVar[str] = "olh"
    auto_rank: ClassVar[int] = 50  # aggregation: a hash per report and value

    def buckets(self) -> int:
        return olh_buckets(self.epsilon)


assert MAX_DOMAIN_SIZE < HASH_PRIME < 1 << 24 and MAX_DOMAIN_SIZE <= 1 << 20  # the bounds _support_counts relies on
