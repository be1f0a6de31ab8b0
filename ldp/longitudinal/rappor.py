"""RAPPOR (Erlingsson, Pihur and Korolova, CCS 2014): a Bloom filter, a memoized permanent response, fresh noise.

Encoding. A value v sets h bits of an m-bit Bloom filter. Here the filter is *partitioned*: hash r (r = 0..h-1)
sets one bit in block r of w = m / h bits, at r w + H_{a_r, b_r}(v) with the exact universal family of
`ldp.frequency.local_hash` (w buckets). The seeds (a_r, b_r) are the device's, fixed by its secret (RAPPOR's
cohort, one per device) and sent with every report. Partitioning keeps the h bits of a value distinct, which the
exact estimator below needs; the privacy bounds are those of the paper.

Stage 1 (PRR, memoized per (device, value)): each filter bit B_i becomes 1 with probability f/2, 0 with f/2 and
stays B_i with 1 - f, so P[B'_i = 1 | B_i = 1] = 1 - f/2 and P[B'_i = 1 | B_i = 0] = f/2.
Stage 2 (IRR, fresh per report): S_i = 1 with probability q if B'_i = 1, p if B'_i = 0.
Chained (paper Sec. 3, derived again with `two_stage.chain`): P[S_i = 1 | B_i = 1] = q* = f (p + q)/2 + (1 - f) q and
P[S_i = 1 | B_i = 0] = p* = f (p + q)/2 + (1 - f) p.

Privacy (paper Thm 1 and Sec. 3.1; tests/ldp/test_longitudinal.py enumerates the channels): the filters of two
values differ in at most 2h bits (exactly 2h when no block collides), each bit a channel of ratio
(1 - f/2) / (f/2), so every report about one value together is eps_inf = 2h ln((1 - f/2) / (f/2)); one report is
eps_1 = h ln(q* (1 - p*) / (p* (1 - q*))). The seeds do not depend on the value.

Estimator (exact, derived here). A report carries h support indicators for each value v, S at position
r w + H_r(v), r = 0..h-1. For the own value they are i.i.d. Bernoulli(q*). For u != v, bit r w + H_r(v) of u's
filter is set iff H_r(u) = H_r(v), independently across r (independent seeds) with the collision probability c of
the family, so they are i.i.d. Bernoulli(p* + c (q* - p*)). That is a pure protocol with s = h supports per report
(`ldp.frequency.base`): p = q*, q = p* + c (q* - p*), estimate (count / (h n) - q) / (p - q), and n * Var[f_hat] =
[q (1 - q) + f (1 - p - q)(p - q)] / (h (p - q)^2).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ldp.base import Column, LDPError, Reports, ReportSchema, check_epsilon
from ldp.frequency.local_hash import HASH_PRIME, SEED_BITS, collision_probability, hash_buckets
from ldp.longitudinal.base import check_budgets
from ldp.longitudinal.memo import TAG_HASH_SEEDS, keyed_words
from ldp.longitudinal.two_stage import (
    TwoStageOracle,
    chain,
    instantaneous_bits,
    permanent_bits,
    unary_epsilon,
)

_CHUNK_ENTRIES = 1 << 17  # (report, value) pairs per chunk during aggregation


def rappor_lifetime_epsilon(f: float, hashes: int) -> float:
    """eps_inf = 2h ln((1 - f/2) / (f/2)) (paper Thm 1)."""
    return 2 * hashes * math.log((1 - f / 2) / (f / 2))


class RAPPOR(TwoStageOracle):
    """RAPPOR with h hashes into an m-bit partitioned Bloom filter; f from eps_inf (or `from_f`), IRR p < q.

    A report is {"a": uint32 (n, h), "b": uint32 (n, h), "bits": uint8 (n, m)}: the device's seeds ((n,) when
    h = 1) and the IRR.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = RAPPOR.from_f(16, f=0.5, p=0.5, q=0.75, hashes=2)  # the paper's example parameters
    >>> round(oracle.epsilon_lifetime, 4), round(oracle.epsilon, 4)  # 4 ln 3 and 2 ln(q*(1-p*)/(p*(1-q*)))
    (4.3944, 1.0743)
    >>> reports = oracle.perturb(np.array([3, 3, 9]), np.random.default_rng(0))
    >>> reports["bits"].shape, int(oracle.accumulate(reports)[-1])
    ((3, 128), 3)
    """

    name: ClassVar[str] = "rappor"
    auto_rank: ClassVar[int] = 150

    def __init__(
        self,
        epsilon_lifetime: float,
        domain_size: int,
        hashes: int = 2,
        bits: int | None = None,
        p: float = 0.5,
        q: float = 0.75,
    ) -> None:
        if isinstance(hashes, bool) or not isinstance(hashes, (int, np.integer)) or hashes < 1:
            raise LDPError(f"hashes must be a positive integer, got {hashes!r}")
        m = 64 * int(hashes) if bits is None else bits
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m % hashes or not 2 <= m // hashes:
            raise LDPError(f"bits must be a multiple of hashes ({hashes}) with at least 2 bits per hash, got {bits!r}")
        if not 0 <= p < q <= 1:
            raise LDPError(f"RAPPOR needs 0 <= p < q <= 1, got p = {p!r}, q = {q!r}")
        self.hashes, self.bits, self.width = int(hashes), int(m), int(m) // int(hashes)
        self.f = 2 / (1 + math.exp(check_epsilon(epsilon_lifetime) / (2 * self.hashes)))  # Thm 1, solved for f
        first, second = (1 - self.f / 2, self.f / 2), (float(q), float(p))
        q_star, p_star = chain(*first, *second)
        one_report = self.hashes * unary_epsilon(q_star, p_star)  # paper Sec. 3.1
        super().__init__(epsilon_lifetime, one_report, domain_size, first, second)
        self._collision = float(collision_probability(self.width))

    @classmethod
    def from_f(cls, domain_size: int, f: float, p: float, q: float, hashes: int = 2, bits: int | None = None) -> RAPPOR:
        """RAPPOR with the paper's parameters f in (0, 1), p, q (eps_inf from `rappor_lifetime_epsilon`)."""
        if not 0 < f < 1:
            raise LDPError(f"f must lie in (0, 1), got {f!r}")
        return cls(rappor_lifetime_epsilon(f, hashes), domain_size, hashes, bits, p, q)

    @classmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int | None = None,
                     hashes: int = 2) -> RAPPOR:
        """RAPPOR with a symmetric IRR (p = 1 - q) solved for eps_1 (derived): with p = 1 - q, q* = 1/2 + (1 - f)
        (q - 1/2) and p* = 1 - q*, so eps_1 = 2h ln(q* / (1 - q*)), q* = 1 / (1 + e^{-eps_1 / (2h)}) and
        q = 1/2 + (q* - 1/2) / (1 - f); q < 1 iff eps_1 < eps_inf."""
        lifetime, first = check_budgets(epsilon_lifetime, epsilon_first)
        f = 2 / (1 + math.exp(lifetime / (2 * hashes)))
        q = 0.5 + (1 / (1 + math.exp(-first / (2 * hashes))) - 0.5) / (1 - f)
        return cls(lifetime, domain_size, hashes, p=1 - q, q=q)  # type: ignore[arg-type]

    @property
    def q_star(self) -> float:
        """P[S_i = 1 | B_i = 1] = f (p + q)/2 + (1 - f) q."""
        return self.p1 * self.p2 + (1 - self.p1) * self.q2

    @property
    def p_star(self) -> float:
        """P[S_i = 1 | B_i = 0] = f (p + q)/2 + (1 - f) p."""
        return self.q1 * self.p2 + (1 - self.q1) * self.q2

    @property
    def p(self) -> float:
        return self.q_star

    @property
    def q(self) -> float:
        return self.p_star + self._collision * (self.q_star - self.p_star)  # derived (module docstring)

    @property
    def supports_per_report(self) -> int:
        return self.hashes

    @property
    def report_bits(self) -> int:
        return self.bits + 2 * SEED_BITS * self.hashes

    @property
    def schema(self) -> ReportSchema:
        h = self.hashes
        return ReportSchema(
            (
                Column("a", "uint32", 1, HASH_PRIME - 1, width=h),
                Column("b", "uint32", 0, HASH_PRIME - 1, width=h),
                Column("bits", "uint8", 0, 1, width=self.bits),
            )
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "domain": self.domain_size,
            "hashes": self.hashes,
            "bits": self.bits,
            "f": self.f,
            "p": self.q2,
            "q": self.p2,
            "p_star": self.p_star,
            "q_star": self.q_star,
        }

    def seeds(self, secrets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The devices' hash seeds (a, b), each (n, h) int64, a in [1, P - 1], b in [0, P - 1]: fixed by the secret.

        From 64-bit keyed words reduced modulo P - 1 and P (a relative bias below 2^-40, ignored).
        """
        words = keyed_words(secrets[:, None], TAG_HASH_SEEDS, np.arange(2 * self.hashes))
        a = (words[:, : self.hashes] % np.uint64(HASH_PRIME - 1)).astype(np.int64) + 1
        b = (words[:, self.hashes :] % np.uint64(HASH_PRIME)).astype(np.int64)
        return a, b

    def filter_positions(self, a: np.ndarray, b: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(n, K', h): bit r w + H_{a_r, b_r}(v) of each device's filter (rows of a, b) set by each of K' codes."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        buckets = hash_buckets(a[:, None, :], b[:, None, :], np.asarray(codes)[None, :, None], self.width)
        return buckets + self.width * np.arange(self.hashes)

    def _permanent(self, codes: np.ndarray, secrets: np.ndarray) -> Reports:
        a, b = self.seeds(secrets)
        own = hash_buckets(a, b, codes[:, None], self.width) + self.width * np.arange(self.hashes)  # (n, h)
        shape = (codes.shape[0], *self.schema.columns[0].row_shape())  # rows of h seeds; one seed when h = 1
        bits = permanent_bits(secrets, codes, own, self.bits, self.p1, self.q1)
        return {"a": a.reshape(shape), "b": b.reshape(shape), "bits": bits}

    def _instantaneous(self, permanent: Reports, rng: np.random.Generator) -> Reports:
        bits = instantaneous_bits(np.asarray(permanent["bits"], dtype=bool), self.p2, self.q2, rng)
        return {"a": permanent["a"], "b": permanent["b"], "bits": bits}

    def _set_at_values(self, reports: Reports, rows: slice, codes: np.ndarray) -> np.ndarray:
        """(rows, len(codes)): how many of each value's h filter bits are set in each report of the slice."""
        bits = np.asarray(reports["bits"])[rows]
        a, b = (np.asarray(reports[name])[rows].reshape(bits.shape[0], self.hashes) for name in ("a", "b"))
        positions = self.filter_positions(a, b, codes)
        set_bits = np.take_along_axis(bits, positions.reshape(bits.shape[0], -1), axis=1)
        return set_bits.reshape(positions.shape).sum(axis=2, dtype=np.int64)

    def _support_counts(self, reports: Reports) -> np.ndarray:
        n, values = np.asarray(reports["bits"]).shape[0], np.arange(self.domain_size)
        rows = max(1, _CHUNK_ENTRIES // (self.domain_size * self.hashes))
        counts = np.zeros(self.domain_size, dtype=np.int64)
        for start in range(0, n, rows):  # vectorised over a chunk of reports x every value
            counts += self._set_at_values(reports, slice(start, start + rows), values).sum(axis=0)
        return counts

    def _support_matrix(self, reports: Reports) -> np.ndarray:
        return self._set_at_values(reports, slice(None), np.arange(self.domain_size))

    def _log_pmf(self, reports: Reports, codes: np.ndarray) -> np.ndarray:
        bits = np.asarray(reports["bits"]).astype(bool)
        q_star, p_star = self.q_star, self.p_star
        seeds = -self.hashes * (math.log(HASH_PRIME - 1) + math.log(HASH_PRIME))  # uniform, independent of v
        ones = bits.sum(axis=1)
        all_clear = ones * math.log(p_star) + (self.bits - ones) * math.log1p(-p_star)  # every bit as a 0 of B
        set_here = self._set_at_values(reports, slice(None), codes)  # of v's h bits (which B sets), how many are 1
        swap_one, swap_zero = math.log(q_star / p_star), math.log1p(-q_star) - math.log1p(-p_star)
        return seeds + all_clear[:, None] + set_here * swap_one + (self.hashes - set_here) * swap_zero
