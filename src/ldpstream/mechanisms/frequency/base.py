"""The contract of a frequency oracle and the estimator every pure protocol shares (004, "pure" framework).

A frequency oracle collects one categorical value per user, an integer code in 0..K-1, and estimates the
frequency of every code. All oracles here are *pure* (004, Wang et al. USENIX Sec'17): each report y supports a
set of values Support(y), and for some p > q

    Pr[v in Support(y) | true value v]  = p,        Pr[v in Support(y) | true value u != v] = q.

The statistics are the number of reports supporting each value plus n; they add across batches. The unbiased
estimator of a count is (sum_j 1{v in Support(y_j)} - n q) / (p - q) (004, "pure" estimator), so the frequency
estimate is (support_count / n - q) / (p - q), and since the support indicators of different users are
independent Bernoulli(p) or Bernoulli(q) variables,

    n * Var[f_hat(v)] = q (1 - q) / (p - q)^2 + f(v) (1 - p - q) / (p - q)      (exact, for any n)

(expand Var of the indicator sum: n_v p (1 - p) + (n - n_v) q (1 - q), divided by n^2 (p - q)^2).
The rare-value limit f(v) -> 0 is 004's Table 1 (`worst_case_variance`).

A report may carry s > 1 support indicators per value (`supports_per_report`; RAPPOR: one per Bloom hash), each
Bernoulli(p) for the own value and Bernoulli(q) for any other, independent given the true value. The support count
then lies in [0, s n], the estimate is (support_count / (s n) - q) / (p - q), and the variance above is divided by s.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Mapping

import numpy as np

from ldpstream.mechanisms.base import Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon

MAX_DOMAIN_SIZE = 1 << 20  # the largest K; local hashing's exact float aggregation relies on it (local_hash.py)
# Beyond, 1 - p (e.g. (K - 1) / (e^eps + K - 1)) falls below double precision next to 1; and it protects nothing.
MAX_EPSILON = 30.0
# Report bytes sampled per chunk of users: the chunk's temporaries stay in a core's caches (512 KiB of L2 on the AMD
# EPYC we measure on), not in memory. A chunk counted in report entries (65,536) was 512 KiB of float64 temporaries
# for GRR's codes but only 512 rows of OUE's 128-bit vectors; 256 KiB of reports is 65,536 GRR codes, 2,048 OUE rows
# (1.4x faster than 512) and 21,845 OLH reports (docs/reference/measured.md).
SAMPLE_CHUNK_BYTES = 1 << 18
# The key-value mechanisms' chunks, in devices per chunk of the widest column (their own loop, keyvalue/base.py).
SAMPLE_CHUNK_ENTRIES = 1 << 16


def check_frequency_epsilon(epsilon: float) -> float:
    """`check_epsilon`, and at most MAX_EPSILON."""
    eps = check_epsilon(epsilon)
    if eps > MAX_EPSILON:
        raise LDPError(f"epsilon {eps:g} is above the supported maximum {MAX_EPSILON:g} for frequency oracles")
    return eps


def check_domain_size(domain_size: int) -> int:
    """The domain size K as an int in [2, MAX_DOMAIN_SIZE], or LDPError."""
    if isinstance(domain_size, bool) or not isinstance(domain_size, (int, np.integer)):
        raise LDPError(f"domain size must be an integer, got {domain_size!r}")
    if not 2 <= domain_size <= MAX_DOMAIN_SIZE:
        raise LDPError(f"domain size must be in [2, {MAX_DOMAIN_SIZE}], got {domain_size}")
    return int(domain_size)


def check_codes(values: np.ndarray | int | list[int], domain_size: int) -> np.ndarray:
    """The true values as an int64 vector of codes in 0..K-1; LDPError for NaN, non-integers, unknown codes."""
    arr = np.atleast_1d(np.asarray(values))
    if arr.ndim != 1:
        raise LDPError(f"a frequency oracle takes a vector of codes, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if np.isnan(arr).any():
            raise LDPError("values contain NaN")
        if not np.array_equal(arr, np.floor(arr)):
            raise LDPError("values must be integer codes, got non-integer numbers")
    elif arr.dtype.kind not in "iu":
        raise LDPError(f"values must be integer codes 0..{domain_size - 1}, got dtype {arr.dtype}")
    if arr.size and not (arr.min() >= 0 and arr.max() < domain_size):
        raise LDPError(
            f"unknown category: codes must lie in 0..{domain_size - 1}, got min {arr.min()}, max {arr.max()}"
        )
    return arr.astype(np.int64, copy=False)


def split_count(stats: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Additive statistics that end with their report count n: (the entries before it, as float64; n). LDPError
    unless they are `size` finite numbers and n a count."""
    try:
        s = np.asarray(stats, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LDPError(f"statistics must be numbers: {exc}") from exc
    if s.shape != (size,):
        raise LDPError(f"statistics must have shape ({size},), got {s.shape}")
    n = s[-1]
    if not np.isfinite(s).all() or n < 0 or n != math.floor(n):
        raise LDPError(f"statistics are not finite or n = {n} is not a count")
    return s[:-1], int(n)


def check_report_batch(schema: ReportSchema, reports: Reports, *, ranges: bool = True) -> int:
    """The number of rows of a well-formed batch of integer columns, or LDPError saying what is wrong.

    Whole-batch checks (one min/max per column), so accumulating a million reports costs no per-row work;
    the aggregator's per-row filter is `ReportSchema.violations`. `ranges=False` leaves the entries' range to a
    caller that checks it as it reads them.
    """
    if not isinstance(reports, Mapping):
        raise LDPError(f"reports must be a dict of columns, got {type(reports).__name__}")
    expected = sorted(c.name for c in schema.columns)
    if sorted(reports) != expected:
        raise LDPError(f"report columns {sorted(reports)} != expected {expected}")
    rows: int | None = None
    for col in schema.columns:
        arr = np.asarray(reports[col.name])
        if arr.ndim == 0 or arr.shape[1:] != col.row_shape():
            raise LDPError(f"column {col.name!r}: shape {arr.shape} does not have rows of shape {col.row_shape()}")
        if rows is not None and arr.shape[0] != rows:
            raise LDPError(f"report columns have different lengths: {rows} and {arr.shape[0]}")
        rows = arr.shape[0]
        if arr.dtype.kind not in "biu":
            raise LDPError(f"column {col.name!r}: dtype {arr.dtype} is not an integer type")
        unsigned_from_zero = arr.dtype.kind in "bu" and col.low <= 0  # no need to read the data for the minimum
        if ranges and arr.size and not ((unsigned_from_zero or arr.min() >= col.low) and arr.max() <= col.high):
            raise LDPError(f"column {col.name!r}: entries outside [{col.low:g}, {col.high:g}]")
    assert rows is not None  # a schema has at least one column
    return rows


def randomized_response(truth: np.ndarray, size: int, keep: float, rng: np.random.Generator) -> np.ndarray:
    """Keep each entry of `truth` (in 0..size-1) with probability `keep`, else replace it by one of the other
    size - 1 values uniformly (generalized randomized response, 004 "Direct Encoding"); int32, vectorised."""
    return randomized_response_from_uniform(truth, size, keep, rng.random(len(truth)))


def randomized_response_from_uniform(truth: np.ndarray, size: int, keep: float, u: np.ndarray) -> np.ndarray:
    """`randomized_response` driven by given uniforms u in [0, 1), one per entry (a memo passes keyed ones).

    One uniform u per entry decides both: u < keep keeps the value (shift 0); otherwise (u - keep) / (1 - keep) is
    uniform on [0, 1) and picks the shift 1..size-1 added modulo size (exact up to the 2^-53 grid of u). The sign of
    u - keep is exact in floating point, so the value is kept exactly when u < keep.
    """
    t = u - keep
    t *= (size - 1) / (1 - keep)
    np.floor(t, out=t)  # kept: <= -1; replaced: 0..size-2 (size - 1 only by rounding as u -> 1)
    np.clip(t, -1.0, size - 2.0, out=t)  # clipped as a float, so the int32 cast is exact (size <= MAX_DOMAIN_SIZE)
    shift = t.astype(np.int32)
    shift += 1
    np.add(shift, truth, out=shift, casting="unsafe")  # in 0..2 size - 2 (truth < size): wrap once
    shift -= (shift >= size).view(np.int8) * np.int32(size)
    return shift


def chunk_rows(schema: ReportSchema) -> int:
    """Users per sampling chunk: SAMPLE_CHUNK_BYTES of their reports."""
    return max(1, SAMPLE_CHUNK_BYTES // sum(c.width * np.dtype(c.dtype).itemsize for c in schema.columns))


def sample_in_chunks(schema: ReportSchema, n: int, sample: Callable[[slice], Reports]) -> Reports:
    """A batch of n reports, sampled chunk of users by chunk (`sample(rows)`) and cast to the schema's dtypes."""
    reports = {c.name: np.empty((n, *c.row_shape()), dtype=c.dtype) for c in schema.columns}
    rows = chunk_rows(schema)
    for start in range(0, n, rows):  # chunks of users, each sampled vectorised
        chunk = sample(slice(start, start + rows))
        for name, column in reports.items():
            column[start : start + rows] = chunk[name]
    return reports


def pure_variance(p: float, q: float, frequencies: np.ndarray | float) -> np.ndarray:
    """n * Var[f_hat(v)] of a pure protocol at true frequency f(v) (module docstring; 004 Table 1 at f = 0)."""
    f = np.asarray(frequencies, dtype=np.float64)
    return q * (1 - q) / (p - q) ** 2 + f * (1 - p - q) / (p - q)


class FrequencyOracle(Mechanism):
    """An epsilon-LDP pure frequency oracle for integer codes 0..K-1 (004).

    A concrete oracle declares its support probabilities `p` and `q`, samples reports, says which values a
    report supports (`support_matrix`, and its fast column sums `_support_counts`), and gives the exact
    probability of a report under each true value (`log_pmf`), from which the tests and the auditor check
    epsilon-LDP. Statistics: support count of each value, then n (length K + 1, additive).
    """

    def __init__(self, epsilon: float, domain_size: int) -> None:
        self.epsilon = check_frequency_epsilon(epsilon)
        self.domain_size = check_domain_size(domain_size)

    # --- what a concrete oracle declares --------------------------------------------------------------------
    @property
    @abstractmethod
    def p(self) -> float:
        """Pr[a report supports the user's own value] (004's p*)."""

    @property
    @abstractmethod
    def q(self) -> float:
        """Pr[a report supports a given value other than the user's own] (004's q*)."""

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Bits needed to encode one report (the communication cost of 004 Table 1)."""

    @property
    def supports_per_report(self) -> int:
        """s: the independent support indicators one report carries for each value (module docstring); 1 here."""
        return 1

    @abstractmethod
    def _sample(self, codes: np.ndarray, rng: np.random.Generator) -> Reports:
        """Reports for a chunk of validated codes (vectorised; `perturb` casts them to the schema's dtypes)."""

    @abstractmethod
    def _support_counts(self, reports: Reports) -> np.ndarray:
        """For each value, how many reports of a validated batch support it (vectorised hot path)."""

    @abstractmethod
    def _support_matrix(self, reports: Reports) -> np.ndarray:
        """(n, K): row j marks Support(y_j), bool (for s > 1 supports per report: how many of them are set)."""

    @abstractmethod
    def _log_pmf(self, reports: Reports, codes: np.ndarray) -> np.ndarray:
        """(n, len(codes)) log Pr[report j | true value codes[i]] for a validated batch."""

    # --- the shared contract ------------------------------------------------------------------------------
    @property
    def stats_size(self) -> int:
        return self.domain_size + 1

    def perturb(self, values: np.ndarray | int | list[int], rng: np.random.Generator) -> Reports:
        codes = check_codes(values, self.domain_size)
        return sample_in_chunks(self.schema, codes.shape[0], lambda rows: self._sample(codes[rows], rng))

    def accumulate(self, reports: Reports) -> np.ndarray:
        n = check_report_batch(self.schema, reports)
        counts = np.asarray(self._support_counts(reports), dtype=np.float64)
        return np.append(counts, float(n))

    def support_matrix(self, reports: Reports) -> np.ndarray:
        """(n, K): which values each report supports (module docstring); its column sums are `accumulate`'s counts."""
        check_report_batch(self.schema, reports)
        return self._support_matrix(reports)

    def log_pmf(self, reports: Reports, values: np.ndarray | int | list[int]) -> np.ndarray:
        """(n, len(values)): log Pr[report j | true value values[i]], exact up to float rounding.

        epsilon-LDP is: for every report, max over values minus min over values <= epsilon.
        """
        check_report_batch(self.schema, reports)
        return self._log_pmf(reports, check_codes(values, self.domain_size))

    def pmf(self, reports: Reports, values: np.ndarray | int | list[int]) -> np.ndarray:
        """(n, len(values)): Pr[report j | true value values[i]]."""
        return np.exp(self.log_pmf(reports, values))

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Unbiased frequency of every value (shape (K,)), stderr from the closed form at the clipped estimate.

        The value is the raw unbiased estimate (it can be negative, and need not sum to 1);
        `ldpstream.mechanisms.postprocess` makes a consistent vector next to it. With no reports the value is NaN and
        the stderr infinite.
        """
        counts, n = self._check_stats(stats)
        if n == 0:
            return Estimate(n=0, value=np.full(self.domain_size, np.nan), stderr=np.full(self.domain_size, np.inf))
        p, q, s = self.p, self.q, self.supports_per_report
        freqs = (counts / (s * n) - q) / (p - q)  # 004, pure estimator c(v) / n
        # The plug-in frequency is clipped to [0, 1] so that the variance is that of a possible distribution.
        stderr = np.sqrt(pure_variance(p, q, np.clip(freqs, 0.0, 1.0)) / (s * n))
        return Estimate(n=n, value=freqs, stderr=stderr)

    def variance(self, frequencies: np.ndarray | float) -> np.ndarray:
        """n * Var[f_hat(v)] at true frequencies f(v) in [0, 1] (exact closed form, module docstring)."""
        f = np.asarray(frequencies, dtype=np.float64)
        if not (np.all(f >= 0) and np.all(f <= 1)):
            raise LDPError("frequencies must lie in [0, 1] (NaN is not a frequency)")
        return pure_variance(self.p, self.q, f) / self.supports_per_report

    def worst_case_variance(self) -> float:
        """n * Var[f_hat(v)] in the limit of a rare value, q (1 - q) / (p - q)^2 (004 Table 1).

        This is the CLI's contract. The variance is linear in f(v); for oracles with p + q < 1 (UE with p = 1/2)
        a very common value has slightly more, `variance(1.0)`.
        """
        return float(pure_variance(self.p, self.q, 0.0)) / self.supports_per_report

    def _check_stats(self, stats: np.ndarray) -> tuple[np.ndarray, int]:
        counts, n = split_count(stats, self.stats_size)
        if counts.size and not (counts.min() >= 0 and counts.max() <= self.supports_per_report * n):
            raise LDPError("support counts must lie in [0, s n] (s supports per report)")
        return counts, n

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g}, domain_size={self.domain_size})"
