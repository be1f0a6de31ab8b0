"""RAPPOR (Erlingsson, Pihur and Korolova, CCS 2014) with cohorts: a Bloom filter per (cohort, value), a memoized
permanent response, fresh noise, and the linear unbiased decode over the candidate values.

Cohorts (paper Sec. 3). There are m cohorts, each with its own h hash functions; a device's cohort is fixed, drawn
uniformly from its secret, and sent with every report. The k-bit filter is partitioned: hash r (r = 0..h-1) of cohort c
sets bit r w + H_{c,r}(v) in block r of w = k / h bits, so the h bits of a value are distinct (the privacy bound below
is then exact). The hashes are public (a keyed mix of (cohort, value, r), `ldpstream.mechanisms.longitudinal.memo`), so
the (m, K, h) table of the bits of every (cohort, value) is computed once: encoding is a lookup.

Stage 1 (PRR, memoized per (device, value)): each filter bit B_i becomes 1 with probability f/2, 0 with f/2 and
stays B_i with 1 - f, so P[B'_i = 1 | B_i = 1] = 1 - f/2 and P[B'_i = 1 | B_i = 0] = f/2.
Stage 2 (IRR, fresh per report): S_i = 1 with probability q if B'_i = 1, p if B'_i = 0.
Chained (paper Sec. 3, derived again with `two_stage.chain`): P[S_i = 1 | B_i = 1] = q* = f (p + q)/2 + (1 - f) q and
P[S_i = 1 | B_i = 0] = p* = f (p + q)/2 + (1 - f) p.

Privacy (paper Thm 1 and Sec. 3.1; tests/mechanisms/test_longitudinal.py enumerates the channels of every cohort): the
filters of two values in one cohort differ in at most 2h bits (exactly 2h when no block collides), each bit a channel
of ratio (1 - f/2) / (f/2), so every report about one value together is eps_inf = 2h ln((1 - f/2) / (f/2)); one
report is eps_1 = h ln(q* (1 - p*) / (p* (1 - q*))). The cohort does not depend on the value.

Estimator (least squares on the cohort design, derived here). X is the (m k, K) 0/1 design: X[(c, i), v] = 1 iff bit
i of cohort c's filter of v is set. Per cohort the statistics are the bit counts Y_c (k) and the report count N_c.
Given its cohort c and value v a report's bits are independent, P[S_i = 1] = p* + Delta X[(c, i), v] with
Delta = q* - p*, and the cohort is uniform and independent of the value, so t = (Y_c - N_c p*) / Delta, stacked over
the cohorts, has E[t] = X n / m (n: the count of each value). With A = (X^T X)^{-1} X^T (X of full column rank, which
the constructor checks) f_hat = m A t / n is unbiased: it is the mean over the reports of z = m A_c (s - p*) / Delta
(A_c: A's columns of cohort c), and E[z | v] = sum_c A_c X_c e_v = e_v. Its variance, with a = p*(1 - p*),
d = q*(1 - q*) - a, G_c = A_c X_c and o the elementwise product:
    E[z_u^2 | v] = m sum_c [a |A_c[u]|^2 + d sum_i A_c[u, i]^2 X_c[i, v]] / Delta^2 + m sum_c G_c[u, v]^2,
and sum_c |A_c[u]|^2 = (X^T X)^{-1}_uu, so n Var[f_hat_u] = sum_v f_v C[u, v] with
    C = m a / Delta^2 diag((X^T X)^{-1}) 1^T + m d / Delta^2 (A o A) X + m sum_c G_c o G_c - I,
exact for any n over independent reports (one window). The m sum_c G_c o G_c term is the cost of not knowing how a
value's devices fell into the cohorts.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon
from ldpstream.mechanisms.frequency.base import (
    check_codes,
    check_domain_size,
    check_frequency_epsilon,
    check_report_batch,
    sample_in_chunks,
)
from ldpstream.mechanisms.frequency.unary import bit_column_sums
from ldpstream.mechanisms.longitudinal.base import Longitudinal, check_budgets, check_secrets
from ldpstream.mechanisms.longitudinal.memo import TAG_BLOOM, TAG_COHORT, draw_secrets, keyed_uniform, keyed_words
from ldpstream.mechanisms.longitudinal.two_stage import chain, instantaneous_bits, permanent_bits, unary_epsilon

MAX_CANDIDATES = 1024  # the least-squares decode holds (X^T X)^{-1} and A: K x K and K x m k
MAX_COHORTS = 1024
MAX_DESIGN_ENTRIES = 1 << 23  # m k K: the design matrix X and the decoder A stay below 64 MB each
DEFAULT_BLOOM_BITS = 32
MIN_EIGENVALUE_RATIO = 1e-9  # X^T X with a smaller eigenvalue ratio does not tell the candidate values apart


def rappor_lifetime_epsilon(f: float, hashes: int) -> float:
    """eps_inf = 2h ln((1 - f/2) / (f/2)) (paper Thm 1)."""
    return 2 * hashes * math.log((1 - f / 2) / (f / 2))


def default_cohorts(domain_size: int, bloom_bits: int) -> int:
    """The smallest power of two m >= 16 with m k >= 8 K: eight design rows per candidate value (at K = 128 the
    rare-value variance is then 1.3x that of h supports without cross-talk; README "Privacy over time")."""
    need = max(16, -(-8 * domain_size // bloom_bits))
    return 1 << (need - 1).bit_length()


def _positive_int(name: str, value: Any, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= most:
        raise LDPError(f"{name} must be an integer in [1, {most}], got {value!r}")
    return int(value)


class RAPPOR(Longitudinal, Mechanism):
    """RAPPOR with m cohorts of h hashes into a k-bit partitioned Bloom filter; f from eps_inf (or `from_f`), IRR p < q.

    A report is {"cohort": uint32 (n,), "bits": uint8 (n, k)}. Statistics: the bit counts of each cohort (m x k,
    cohort-major), then each cohort's report count (m); additive.

    Examples
    --------
    >>> import numpy as np
    >>> oracle = RAPPOR.from_f(16, f=0.5, p=0.5, q=0.75, hashes=2)  # the paper's example parameters
    >>> round(oracle.epsilon_lifetime, 4), round(oracle.epsilon, 4), oracle.cohorts  # 4 ln 3, 2 ln(...)
    (4.3944, 1.0743, 16)
    >>> reports = oracle.perturb(np.array([3, 3, 9]), np.random.default_rng(0))
    >>> reports["bits"].shape, int(oracle.accumulate(reports)[-16:].sum())
    ((3, 32), 3)
    """

    name: ClassVar[str] = "rappor"
    auto_rank: ClassVar[int] = 150
    kind: ClassVar = "frequency"

    def __init__(
        self,
        epsilon_lifetime: float,
        domain_size: int,
        hashes: int = 2,
        bloom_bits: int = DEFAULT_BLOOM_BITS,
        cohorts: int | None = None,
        p: float = 0.5,
        q: float = 0.75,
    ) -> None:
        k = check_domain_size(domain_size)
        if k > MAX_CANDIDATES:
            raise LDPError(f"RAPPOR decodes at most {MAX_CANDIDATES} candidate values, got a domain of {k}")
        h = _positive_int("hashes", hashes, 64)
        bits = _positive_int("bloom_bits", bloom_bits, 4096)
        if bits % h or bits // h < 2:
            raise LDPError(f"bloom_bits must be a multiple of hashes ({h}) with at least 2 bits per hash, got {bits}")
        m = default_cohorts(k, bits) if cohorts is None else _positive_int("cohorts", cohorts, MAX_COHORTS)
        if m * bits * k > MAX_DESIGN_ENTRIES:
            raise LDPError(f"RAPPOR's design of {m} cohorts x {bits} Bloom bits x {k} values has more than "
                           f"{MAX_DESIGN_ENTRIES} entries")
        if not 0 <= p < q <= 1:
            raise LDPError(f"RAPPOR needs 0 <= p < q <= 1, got p = {p!r}, q = {q!r}")
        self.epsilon_lifetime = check_frequency_epsilon(epsilon_lifetime)
        self.domain_size, self.hashes, self.bloom_bits, self.cohorts = k, h, bits, m
        self.width = bits // h
        self.f = 2 / (1 + math.exp(self.epsilon_lifetime / (2 * h)))  # Thm 1, solved for f
        self.p1, self.q1, self.p2, self.q2 = 1 - self.f / 2, self.f / 2, float(q), float(p)
        self.q_star, self.p_star = chain(self.p1, self.q1, self.p2, self.q2)
        self.epsilon = check_epsilon(h * unary_epsilon(self.q_star, self.p_star))  # paper Sec. 3.1
        self.positions = self._filter_positions()
        self._gram = self.design.T @ self.design
        eigenvalues = np.linalg.eigvalsh(self._gram)
        if not eigenvalues[0] > MIN_EIGENVALUE_RATIO * eigenvalues[-1]:
            raise LDPError(
                f"RAPPOR with {m} cohorts of {bits} Bloom bits ({h} hashes) cannot tell the {k} candidate values apart"
                " (singular design): use more cohorts or Bloom bits"
            )

    @classmethod
    def from_f(cls, domain_size: int, f: float, p: float, q: float, hashes: int = 2,
               bloom_bits: int = DEFAULT_BLOOM_BITS, cohorts: int | None = None) -> RAPPOR:
        """RAPPOR with the paper's parameters f in (0, 1), p, q (eps_inf from `rappor_lifetime_epsilon`)."""
        if not 0 < f < 1:
            raise LDPError(f"f must lie in (0, 1), got {f!r}")
        h = _positive_int("hashes", hashes, 64)
        return cls(rappor_lifetime_epsilon(f, h), domain_size, h, bloom_bits, cohorts, p, q)

    @classmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int | None = None,
                     hashes: int = 2, bloom_bits: int = DEFAULT_BLOOM_BITS, cohorts: int | None = None) -> RAPPOR:
        """RAPPOR with a symmetric IRR (p = 1 - q) solved for eps_1 (derived): with p = 1 - q, q* = 1/2 + (1 - f)
        (q - 1/2) and p* = 1 - q*, so eps_1 = 2h ln(q* / (1 - q*)), q* = 1 / (1 + e^{-eps_1 / (2h)}) and
        q = 1/2 + (q* - 1/2) / (1 - f); q < 1 iff eps_1 < eps_inf."""
        lifetime, first = check_budgets(epsilon_lifetime, epsilon_first)
        h = _positive_int("hashes", hashes, 64)
        f = 2 / (1 + math.exp(lifetime / (2 * h)))
        q = 0.5 + (1 / (1 + math.exp(-first / (2 * h))) - 0.5) / (1 - f)
        return cls(lifetime, domain_size, h, bloom_bits, cohorts, p=1 - q, q=q)  # type: ignore[arg-type]

    # --- encoding ---------------------------------------------------------------------------------------------------
    def _filter_positions(self) -> np.ndarray:
        """(m, K, h) intp: bit r w + H_{c,r}(v) set by value v in cohort c (public hashes, `TAG_BLOOM`).

        From 64-bit keyed words reduced modulo w (a relative bias below w 2^-64, ignored)."""
        m, k, h = self.cohorts, self.domain_size, self.hashes
        words = keyed_words(np.arange(m, dtype=np.uint64)[:, None, None], TAG_BLOOM,
                            np.arange(k)[None, :, None], np.arange(h)[None, None, :])
        return (words % np.uint64(self.width)).astype(np.intp) + self.width * np.arange(h)

    @cached_property
    def design(self) -> np.ndarray:
        """X, (m k, K) float: X[c k + i, v] = 1 iff bit i of cohort c's filter of v is set."""
        m, k = self.cohorts, self.domain_size
        x = np.zeros((m, self.bloom_bits, k))
        x[np.arange(m)[:, None, None], self.positions, np.arange(k)[None, :, None]] = 1.0
        return x.reshape(m * self.bloom_bits, k)

    def device_cohorts(self, secrets: np.ndarray) -> np.ndarray:
        """Each device's cohort in 0..m-1 (int64), uniform and fixed by its secret."""
        return np.floor(keyed_uniform(secrets, TAG_COHORT) * self.cohorts).astype(np.int64)

    # --- the mechanism ----------------------------------------------------------------------------------------------
    @property
    def schema(self) -> ReportSchema:
        return ReportSchema(
            (Column("cohort", "uint32", 0, self.cohorts - 1), Column("bits", "uint8", 0, 1, width=self.bloom_bits))
        )

    @property
    def stats_size(self) -> int:
        return self.cohorts * (self.bloom_bits + 1)

    def parameters(self) -> dict[str, Any]:
        return {
            "domain": self.domain_size,
            "hashes": self.hashes,
            "bloom_bits": self.bloom_bits,
            "cohorts": self.cohorts,
            "f": self.f,
            "p": self.q2,
            "q": self.p2,
            "p_star": self.p_star,
            "q_star": self.q_star,
        }

    def memo_keys(self, values: np.ndarray, secrets: np.ndarray) -> np.ndarray:
        """The value's code: the permanent response is memoized per (device, value)."""
        codes = check_codes(values, self.domain_size)
        check_secrets(secrets, codes.shape[0])
        return codes

    def permanent_response(self, values: np.ndarray | int | list[int], secrets: np.ndarray) -> Reports:
        """The memoized PRRs of devices (secrets) to values, with their cohorts: what every later report perturbs."""
        codes = check_codes(values, self.domain_size)
        return self._permanent(codes, check_secrets(secrets, codes.shape[0]))

    def _permanent(self, codes: np.ndarray, secrets: np.ndarray) -> Reports:
        cohort = self.device_cohorts(secrets)
        bits = permanent_bits(secrets, codes, self.positions[cohort, codes], self.bloom_bits, self.p1, self.q1)
        return {"cohort": cohort, "bits": bits}

    def perturb(
        self, values: np.ndarray | int | list[int], rng: np.random.Generator, secrets: np.ndarray | None = None
    ) -> Reports:
        """One report per device; without secrets every row is a new device (`longitudinal.base`)."""
        codes = check_codes(values, self.domain_size)
        keys = draw_secrets(rng, codes.shape[0]) if secrets is None else check_secrets(secrets, codes.shape[0])

        def sample(rows: slice) -> Reports:
            permanent = self._permanent(codes[rows], keys[rows])
            return {"cohort": permanent["cohort"], "bits": instantaneous_bits(permanent["bits"], self.p2, self.q2, rng)}

        return sample_in_chunks(self.schema, codes.shape[0], sample)

    def accumulate(self, reports: Reports) -> np.ndarray:
        """Each cohort's bit counts and report count: the reports' rows grouped by cohort (a stable radix sort, the
        rows moved as whole k-byte records), then each cohort's column sums (`bit_column_sums`)."""
        n = check_report_batch(self.schema, reports)
        cohort = np.asarray(reports["cohort"]).astype(np.uint8 if self.cohorts <= 256 else np.uint16)  # checked < m
        sizes = np.bincount(cohort, minlength=self.cohorts)
        counts = np.zeros((self.cohorts, self.bloom_bits))
        if n:
            rows = np.ascontiguousarray(reports["bits"], dtype=np.uint8).view(f"V{self.bloom_bits}").reshape(n)
            grouped = np.take(rows, np.argsort(cohort, kind="stable")).view(np.uint8).reshape(n, self.bloom_bits)
            ends = np.cumsum(sizes)
            for c in np.flatnonzero(sizes):  # a loop over the cohorts present, not over reports
                counts[c] = bit_column_sums(grouped[ends[c] - sizes[c] : ends[c]])
        return np.concatenate([counts.ravel(), sizes.astype(np.float64)])

    # --- the decode -------------------------------------------------------------------------------------------------
    @cached_property
    def decoder(self) -> np.ndarray:
        """A = (X^T X)^{-1} X^T, (K, m k): f_hat = m A t / n (module docstring)."""
        return np.linalg.solve(self._gram, self.design.T)

    @cached_property
    def variance_matrix(self) -> np.ndarray:
        """C, (K, K): n Var[f_hat_u] = sum_v C[u, v] f_v (module docstring)."""
        a_mat, x, m, k = self.decoder, self.design, self.cohorts, self.domain_size
        delta = self.q_star - self.p_star
        clear, set_ = self.p_star * (1 - self.p_star), self.q_star * (1 - self.q_star)
        inverse_diagonal = np.einsum("ui,ui->u", a_mat, a_mat)  # diag(A A^T) = diag((X^T X)^{-1})
        c = m * clear / delta**2 * inverse_diagonal[:, None] + m * (set_ - clear) / delta**2 * ((a_mat * a_mat) @ x)
        blocks = a_mat.reshape(k, m, self.bloom_bits)
        for cohort in range(m):  # m products K x k x K; a loop over cohorts, not devices or values
            g = blocks[:, cohort] @ x[cohort * self.bloom_bits : (cohort + 1) * self.bloom_bits]
            c += m * g * g
        return c - np.eye(k)

    def _check_stats(self, stats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(stats, dtype=np.float64)
        if s.shape != (self.stats_size,) or not np.isfinite(s).all():
            raise LDPError(f"statistics must be {self.stats_size} finite numbers, got shape {s.shape}")
        counts, sizes = s[: -self.cohorts].reshape(self.cohorts, self.bloom_bits), s[-self.cohorts :]
        if not ((sizes >= 0).all() and (sizes == np.floor(sizes)).all()
                and ((counts >= 0) & (counts <= sizes[:, None])).all()):
            raise LDPError("statistics are not counts with 0 <= bit count <= cohort size")
        return counts, sizes

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Unbiased frequency of every candidate value (module docstring); stderr from C at the clipped estimate
        renormalized to a distribution."""
        counts, sizes = self._check_stats(stats)
        n, k = int(sizes.sum()), self.domain_size
        if n == 0:
            return Estimate(n=0, value=np.full(k, np.nan), stderr=np.full(k, np.inf))
        t = (counts - sizes[:, None] * self.p_star) / (self.q_star - self.p_star)
        freqs = self.cohorts * (self.decoder @ t.ravel()) / n
        plug_in = np.clip(freqs, 0.0, 1.0)
        plug_in = plug_in / plug_in.sum() if plug_in.sum() > 0 else np.full(k, 1.0 / k)
        return Estimate(n=n, value=freqs, stderr=np.sqrt(self.variance(plug_in) / n))

    def variance(self, frequencies: np.ndarray) -> np.ndarray:
        """n Var[f_hat] at a true distribution f (..., K) (rows of one-hot vectors: one report's variance), exact."""
        f = np.asarray(frequencies, dtype=np.float64)
        if f.shape[-1:] != (self.domain_size,) or not (np.all(f >= 0) and np.all(f <= 1)):
            raise LDPError(f"frequencies must be distributions over {self.domain_size} values with entries in [0, 1]")
        return f @ self.variance_matrix.T

    def worst_case_variance(self) -> float:
        """max over u of n Var[f_hat_u] when u is absent (f_u = 0) and all reports hold the worst other value."""
        c = self.variance_matrix + np.diag(np.full(self.domain_size, -np.inf))
        return float(c.max())

    def log_pmf(self, reports: Reports, values: np.ndarray | int | list[int]) -> np.ndarray:
        """(n, len(values)): log Pr[report j | true value values[i]] of one report (the cohort is uniform)."""
        n = check_report_batch(self.schema, reports)
        codes = check_codes(values, self.domain_size)
        bits = np.asarray(reports["bits"]).astype(bool)
        cohort = np.asarray(reports["cohort"]).astype(np.intp)
        ones = bits.sum(axis=1)
        all_clear = ones * math.log(self.p_star) + (self.bloom_bits - ones) * math.log1p(-self.p_star)
        positions = self.positions[cohort][:, codes]  # (n, K', h)
        set_here = np.take_along_axis(bits, positions.reshape(n, -1), axis=1).reshape(positions.shape).sum(axis=2)
        swap_one = math.log(self.q_star / self.p_star)
        swap_zero = math.log1p(-self.q_star) - math.log1p(-self.p_star)
        return (-math.log(self.cohorts) + all_clear[:, None] + set_here * swap_one
                + (self.hashes - set_here) * swap_zero)

    def memo_parameters(self) -> tuple[tuple[str, float], ...]:
        return (("epsilon_lifetime", self.epsilon_lifetime), ("domain_size", self.domain_size),
                ("hashes", self.hashes), ("bloom_bits", self.bloom_bits), ("cohorts", self.cohorts))

    def __repr__(self) -> str:
        return (
            f"RAPPOR(epsilon_lifetime={self.epsilon_lifetime:g}, domain_size={self.domain_size}, hashes={self.hashes},"
            f" bloom_bits={self.bloom_bits}, cohorts={self.cohorts})"
        )
