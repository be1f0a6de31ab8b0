"""Microsoft's dBitFlip for histograms, memoized (Ding, Kulkarni and Yekhanin, NeurIPS 2017, Sec. 2.2 and 3).

A device samples d of the K buckets uniformly without replacement, once (read from its secret by Floyd's
algorithm), and for each sampled bucket j_p sends a bit: 1 with probability e^{eps/2} / (e^{eps/2} + 1) if its value
is j_p, else 1 / (e^{eps/2} + 1). The bits for a value are memoized per (device, value); output perturbation
(optional) flips each bit afresh per report with probability gamma. A report is the d buckets and their bits.

Privacy. The buckets do not depend on the value; two values change at most two of the d bits, each of ratio e^{eps/2},
so the memoized response to a value is eps-LDP (their Thm 2), and every report about one value together is eps_lifetime
= eps; L distinct values cost at most L eps. One report: each bit with output perturbation has P[1 | own] = P_own =
gamma + (1 - 2 gamma) e^{eps/2} / (e^{eps/2} + 1) and P[1 | other] = P_other likewise, so eps_1 = 2
`flipped_epsilon`(eps / 2, gamma). Erratum, found by enumerating the channel (tests/mechanisms/test_longitudinal.py):
with d = 1 two values are never both sampled, so only one bit can differ and the paper's e^{eps/2} bit is eps/2-LDP,
half the budget. Here a bit takes the whole eps when d = 1 (and eps_1 = `flipped_epsilon`(eps, gamma)), so the budget is
spent exactly for every d.

Estimator (their Sec. 2.2, debiased for gamma): with Delta = P_own - P_other,
    f_hat(v) = K / (n d) * sum over the devices that sampled v of (y_v - P_other) / Delta,
so the statistics are, per value, the number of reports with a 1 at v and the number that sampled v, and n.
Per device the term T = (K/d) 1{v sampled} (y_v - P_other) / Delta has mean 1{own value = v}, and (derived)
    Var[T | own] = (K/d) (P_own (1 - P_own) / Delta^2 + 1) - 1,
    Var[T | other] = (K/d) P_other (1 - P_other) / Delta^2,
so n * Var[f_hat(v)] = f(v) Var[T | own] + (1 - f(v)) Var[T | other], exact for one window.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import (
    check_codes,
    check_domain_size,
    check_frequency_epsilon,
    check_report_batch,
    sample_in_chunks,
)
from ldpstream.mechanisms.frequency.unary import bernoulli_bits
from ldpstream.mechanisms.longitudinal.base import Longitudinal, check_gamma, check_secrets, flip_for, flipped_epsilon
from ldpstream.mechanisms.longitudinal.memo import TAG_SAMPLE, draw_secrets, keyed_bits, keyed_uniform


class DBitFlip(Longitudinal, Mechanism):
    """dBitFlip: d of K buckets fixed per device, one memoized bit each, output perturbation gamma.

    A report is {"buckets": uint32 (n, d), ascending and distinct, "bits": uint8 (n, d)} ((n,) each when d = 1).
    Statistics: per value the count of 1 bits, then per value the count of devices that sampled it, then n
    (length 2K + 1, additive).

    Examples
    --------
    >>> import numpy as np
    >>> mech = DBitFlip(2.0, 8, sampled=2)
    >>> secrets = np.array([5, 5, 6], dtype=np.uint64)
    >>> mech.sampled_buckets(secrets).tolist()  # fixed per device
    [[3, 4], [3, 4], [4, 6]]
    >>> round(mech.worst_case_variance(), 4)  # (K/d) P_other (1 - P_other) / Delta^2 = 4 e / (e - 1)^2 (eps/2 a bit)
    3.6827
    """

    name: ClassVar[str] = "dbitflip"
    auto_rank: ClassVar[int] = 170
    kind: ClassVar = "frequency"

    def __init__(self, epsilon_lifetime: float, domain_size: int, sampled: int = 1, gamma: float = 0.0) -> None:
        lifetime, k, g = check_frequency_epsilon(epsilon_lifetime), check_domain_size(domain_size), check_gamma(gamma)
        if isinstance(sampled, bool) or not isinstance(sampled, (int, np.integer)) or not 1 <= sampled <= k:
            raise LDPError(f"sampled buckets d must be an integer in [1, {k}], got {sampled!r}")
        self.epsilon_lifetime, self.domain_size, self.sampled, self.gamma = lifetime, k, int(sampled), g
        differing = min(2, self.sampled)  # bits two values can change (module docstring, erratum)
        self.epsilon = differing * flipped_epsilon(lifetime / differing, g)
        self.memo_own = 1 / (1 + math.exp(-lifetime / differing))  # their Sec. 2.2, at eps/2 per bit when d > 1
        self.p_own = g + (1 - 2 * g) * self.memo_own
        self.p_other = g + (1 - 2 * g) * (1 - self.memo_own)

    @classmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int | None = None,
                     sampled: int = 1) -> DBitFlip:
        """dBitFlip with the output perturbation gamma that makes one report exactly eps_1-LDP (`flip_for` per
        differing bit)."""
        differing = min(2, sampled)
        gamma = flip_for(epsilon_lifetime / differing, epsilon_first / differing)
        return cls(epsilon_lifetime, domain_size, sampled, gamma)  # type: ignore[arg-type]

    def memo_keys(self, values: np.ndarray, secrets: np.ndarray) -> np.ndarray:
        """The value's code: the bits are memoized per (device, value)."""
        codes = check_codes(values, self.domain_size)
        check_secrets(secrets, codes.shape[0])
        return codes

    def parameters(self) -> dict[str, Any]:
        return {"domain": self.domain_size, "sampled": self.sampled, "gamma": self.gamma,
                "p_own": self.p_own, "p_other": self.p_other}

    @property
    def schema(self) -> ReportSchema:
        d = self.sampled
        return ReportSchema(
            (Column("buckets", "uint32", 0, self.domain_size - 1, width=d), Column("bits", "uint8", 0, 1, width=d))
        )

    @property
    def stats_size(self) -> int:
        return 2 * self.domain_size + 1

    def sampled_buckets(self, secrets: np.ndarray) -> np.ndarray:
        """(n, d) int64: each device's d distinct buckets, ascending, uniform over the d-subsets (Floyd's algorithm).

        Floyd: for j = K - d .. K - 1 draw t uniform in [0, j]; take t unless already taken, else j. The uniform
        integer is floor(u (j + 1)) for a keyed uniform u (exact up to the 2^-53 grid of u).
        """
        keys = np.atleast_1d(np.asarray(secrets))
        uniforms = keyed_uniform(keys[:, None], TAG_SAMPLE, np.arange(self.sampled))  # one stream, d draws
        top = np.arange(self.domain_size - self.sampled, self.domain_size)
        draws = np.floor(uniforms * (top + 1)).astype(np.int64)
        chosen = np.empty_like(draws)
        for i in range(self.sampled):  # d steps, not devices
            taken = np.zeros(keys.shape[0], dtype=bool)
            for j in range(i):  # 1-d comparisons: .any(axis=1) over a narrow (n, i) block costs several times more
                taken |= chosen[:, j] == draws[:, i]
            chosen[:, i] = np.where(taken, top[i], draws[:, i])
        return np.sort(chosen, axis=1)

    def perturb(
        self, values: np.ndarray | int | list[int], rng: np.random.Generator, secrets: np.ndarray | None = None
    ) -> Reports:
        """One report per device; without secrets every row is a new device (`longitudinal.base`)."""
        codes = check_codes(values, self.domain_size)
        keys = draw_secrets(rng, codes.shape[0]) if secrets is None else check_secrets(secrets, codes.shape[0])
        shape = (-1, *self.schema.columns[0].row_shape())  # rows of d entries; one entry when d = 1

        def sample(rows: slice) -> Reports:
            buckets = self.sampled_buckets(keys[rows])
            own = buckets == codes[rows, None]
            # the memo: Bernoulli(1 - memo_own) bits, 8 per keyed word, flipped where the bucket is the own value
            bits = keyed_bits(keys[rows], codes[rows], self.sampled, 1 - self.memo_own)[0] ^ own
            bits ^= bernoulli_bits(bits.shape, self.gamma, rng)  # output perturbation, fresh per report
            return {"buckets": buckets.reshape(shape), "bits": bits.reshape(shape)}

        return sample_in_chunks(self.schema, codes.shape[0], sample)

    def _columns(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """(buckets int64, bits bool), each (n, d), of a checked batch."""
        n = check_report_batch(self.schema, reports)
        buckets = np.asarray(reports["buckets"], dtype=np.int64).reshape(n, self.sampled)
        return buckets, np.asarray(reports["bits"], dtype=bool).reshape(n, self.sampled)

    def accumulate(self, reports: Reports) -> np.ndarray:
        """Per value the reports with a 1 there and those that sampled it, then n: one count of (bucket, bit)."""
        n = check_report_batch(self.schema, reports)
        buckets = np.ascontiguousarray(reports["buckets"]).reshape(-1)  # as sent: the checks need no int64 copy
        ascending = buckets[1:] > buckets[:-1]  # flat and contiguous: 10x faster than over the (n, d) columns
        ascending[self.sampled - 1 :: self.sampled] = True  # from one report to the next
        if not ascending.all():
            raise LDPError("each report's buckets must be distinct and ascending")
        cells = buckets.astype(np.intp) * 2 + np.asarray(reports["bits"]).reshape(-1)  # bits are 0/1: checked
        counts = np.bincount(cells.ravel(), minlength=2 * self.domain_size).reshape(self.domain_size, 2)
        return np.concatenate([counts[:, 1], counts.sum(axis=1), [n]]).astype(np.float64)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Unbiased frequency of every value (module docstring), stderr from the closed form at the clipped estimate."""
        s = np.asarray(stats, dtype=np.float64)
        k = self.domain_size
        if s.shape != (self.stats_size,) or not np.isfinite(s).all():
            raise LDPError(f"statistics must be {self.stats_size} finite numbers, got shape {s.shape}")
        ones, seen, n = s[:k], s[k : 2 * k], s[-1]
        if n < 0 or n != math.floor(n) or not ((0 <= ones) & (ones <= seen) & (seen <= n)).all():
            raise LDPError("statistics are not counts with ones <= sampled <= n")
        if n == 0:
            return Estimate(n=0, value=np.full(k, np.nan), stderr=np.full(k, np.inf))
        delta = self.p_own - self.p_other
        freqs = k / (n * self.sampled) * (ones - seen * self.p_other) / delta  # their Sec. 2.2, debiased for gamma
        return Estimate(n=int(n), value=freqs, stderr=np.sqrt(self.variance(np.clip(freqs, 0.0, 1.0)) / n))

    def variance(self, frequencies: np.ndarray | float) -> np.ndarray:
        """n * Var[f_hat(v)] at true frequencies f(v) in [0, 1] (exact, module docstring)."""
        f = np.asarray(frequencies, dtype=np.float64)
        if not (np.all(f >= 0) and np.all(f <= 1)):
            raise LDPError("frequencies must lie in [0, 1] (NaN is not a frequency)")
        scale, delta2 = self.domain_size / self.sampled, (self.p_own - self.p_other) ** 2
        own = scale * (self.p_own * (1 - self.p_own) / delta2 + 1) - 1  # derived (module docstring)
        other = scale * self.p_other * (1 - self.p_other) / delta2
        return f * own + (1 - f) * other

    def worst_case_variance(self) -> float:
        """n * Var[f_hat(v)] for a rare value (f -> 0)."""
        return float(self.variance(0.0))

    def log_pmf(self, reports: Reports, values: np.ndarray | int | list[int]) -> np.ndarray:
        """(n, len(values)): log Pr[report j | true value values[i]] of one report (the buckets are uniform)."""
        buckets, bits = self._columns(reports)
        codes = check_codes(values, self.domain_size)
        prob = np.where(buckets[:, None, :] == codes[None, :, None], self.p_own, self.p_other)
        subsets = -math.log(math.comb(self.domain_size, self.sampled))
        return subsets + np.where(bits[:, None, :], np.log(prob), np.log1p(-prob)).sum(axis=2)

    def memo_parameters(self) -> tuple[tuple[str, float], ...]:
        return (("epsilon_lifetime", self.epsilon_lifetime), ("domain_size", self.domain_size),
                ("sampled", self.sampled), ("gamma", self.gamma))

    def __repr__(self) -> str:
        return (
            f"DBitFlip(epsilon_lifetime={self.epsilon_lifetime:g}, domain_size={self.domain_size}, "
            f"sampled={self.sampled}, gamma={self.gamma:g})"
        )
