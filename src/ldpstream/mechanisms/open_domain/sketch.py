"""Sketch frequency oracles over strings: Apple's count-mean sketch (CMS), its Hadamard variant (HCMS), and
randomized response on a hashed bucket with a fixed public hash family (the oracle of our PEM).

Apple (Differential Privacy Team, "Learning with Privacy at Scale", 2017) fixes k public hash functions
h_1..h_k : strings -> [m]. A device with string d draws j uniformly from [k], reports j and a perturbed view of the
bucket h_j(d); the server keeps, per (j, bucket), an additive sum, and estimates the frequency of any candidate d.
Every variant here defines a per-device term z(d) with E[z(d) | j, d_u] = 1{h_j(d_u) = h_j(d)}:

- CMS: the one-hot +-1 vector of h_j(d) in {-1, +1}^m, every entry flipped with probability 1/(1 + e^(eps/2));
  z = (c x_b + 1) / 2 with c = (e^(eps/2) + 1) / (e^(eps/2) - 1), b = h_j(d);
  Var[z] = (c^2 - (2 gamma - 1)^2) / 4.
- HCMS: a uniform row l of the m x m Sylvester-Hadamard matrix, the one bit H[l, h_j(d)] kept with probability
  e^eps / (e^eps + 1); z = c w H[l, b] with w the reported +-1 and c = (e^eps + 1) / (e^eps - 1); z^2 = c^2, so
  Var[z] = c^2 - gamma^2.
- hashed GRR: y = h_j(d) kept with probability p = e^eps / (e^eps + g - 1), else another of the g buckets;
  z = (1{y = b} - q) / (p - q), q = (1 - p) / (g - 1); Var[z] = pi (1 - pi) / (p - q)^2, pi = q + (p - q) gamma.

Here gamma = gamma(d_u, d) = (1/k) sum_j 1{h_j(d_u) = h_j(d)} is the fraction of the public hashes on which the
device's string collides with d (1 for d_u = d). The estimator is f_hat(d) = m/(m-1) (mean_u z_u(d) - 1/m), so

    E[f_hat(d) | hashes] = f(d) + bias(d),    bias(d) = m/(m-1) sum_{d' != d} f(d') (gamma(d', d) - 1/m),
    n Var[f_hat(d) | hashes] = (m/(m-1))^2 mean_u V(gamma(d_u, d)),

exact for fixed hashes (the devices are independent given them). Over the draw of the hashes (a fresh collection
seed) gamma(d', d) ~ Binomial(k, 1/m) / k, so E[bias] = 0 and Var[bias] = sum_{d' != d} f(d')^2 / ((m - 1) k):
the collision bias of a fixed public family is of order sqrt(sum f^2 / (k m)) (6.4e-4 for k = 64, m = 1024
and a Zipf(1.1) population over 1e5 strings, sum f^2 = 0.027), next to a noise of sqrt(c^2 / n). The standard
error shown is the noise's, sqrt((m/(m-1))^2 (f V(1) + (1 - f) E[V(gamma)]) / n), with E[gamma] = 1/m and
E[gamma^2] = 1/m^2 + (m-1)/(m^2 k). arXiv 2406.03785 (Pan, 2024) reports errors in the expectation and variance
of Apple's paper; the identities above are derived here from the definitions and tested by simulation.

Privacy: j (and the Hadamard row) is independent of d; given it, CMS flips m bits independently and two strings
differ in at most two positions, ratio <= ((1 - phi)/phi)^2 = e^eps; HCMS and hashed GRR are randomized response on
one value, ratio <= e^eps. The tests enumerate every report of small sketches and check the maximum is e^eps.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import (
    check_frequency_epsilon,
    check_report_batch,
    randomized_response,
    split_count,
)
from ldpstream.mechanisms.frequency.hadamard import hadamard_bit, walsh_hadamard_transform
from ldpstream.mechanisms.open_domain.strings import StringDomain, buckets, hash_salts, prefix_fingerprints

MAX_SKETCH_CELLS = 1 << 22  # k m: the statistics of one sketch (32 MiB of float64)
_CHUNK_ROWS = 1 << 16


def _check_size(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise LDPError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


class SketchOracle(Mechanism):
    """A count-mean-sketch-style oracle for the first `prefix_length` bytes of strings of a `StringDomain`.

    Reports carry "hash" (the index j) and the variant's columns. Statistics: the variant's per-(j, bucket) sums,
    then n. `estimate` gives the frequencies of the `dictionary` (Apple's setting: a known list of candidates);
    `frequencies` those of any strings; both unbiased over the draw of the hashes (module docstring).
    """

    auto_rank: ClassVar[int]

    def __init__(self, epsilon: float, domain: StringDomain, hashes: int, width: int, seed: int = 0,
                 prefix_length: int | None = None, dictionary: Sequence[str] | None = None) -> None:
        self.epsilon = check_frequency_epsilon(epsilon)
        self.domain = domain
        self.hashes = _check_size("hashes", hashes, 1, 1 << 16)
        self.width = _check_size("width", width, 2, MAX_SKETCH_CELLS)
        if self.hashes * self.width > MAX_SKETCH_CELLS:
            raise LDPError(f"hashes x width = {self.hashes * self.width} is above {MAX_SKETCH_CELLS} cells")
        self.seed = int(seed)
        self.prefix_length = domain.max_length if prefix_length is None else prefix_length
        _check_size("prefix_length", self.prefix_length, 1, domain.max_length)
        self.salts = hash_salts(self.seed, self.hashes)
        self.dictionary = None if dictionary is None else tuple(dictionary)
        self._dictionary_rows = None if dictionary is None else domain.encode(list(dictionary))

    # --- what a variant declares ----------------------------------------------------------------------------------
    @property
    @abstractmethod
    def _columns(self) -> tuple[Column, ...]:
        """The report columns after "hash"."""

    @abstractmethod
    def _sample(self, j: np.ndarray, bucket: np.ndarray, rng: np.random.Generator) -> Reports:
        """The variant's report columns for devices whose hashed bucket is `bucket` under hash j."""

    @abstractmethod
    def _cell_sums(self, reports: Reports) -> np.ndarray:
        """The variant's additive sums of a validated batch (flat, length `stats_size - 1`)."""

    @abstractmethod
    def _z_table(self, sums: np.ndarray) -> np.ndarray:
        """(k, m): T[j, b] = sum over devices with hash j of z(b), from the additive sums."""

    @abstractmethod
    def _z_terms(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        """(n, C): each device's z for each candidate, given the candidates' buckets under the device's hash."""

    @abstractmethod
    def _log_pmf_given_hash(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        """(n, C): log Pr[report columns | hash j, true bucket] (without the -log k of drawing j)."""

    @abstractmethod
    def z_variance(self, gamma_mean: np.ndarray | float, gamma_square_mean: np.ndarray | float) -> np.ndarray:
        """E[Var[z]] for collision fractions gamma with the given first two moments (module docstring)."""

    # --- shared --------------------------------------------------------------------------------------------------
    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("hash", "uint32", 0, self.hashes - 1), *self._columns))

    @property
    def stats_size(self) -> int:
        return self._sums_size + 1

    @property
    def _sums_size(self) -> int:
        return self.hashes * self.width

    def fingerprints(self, rows: np.ndarray) -> np.ndarray:
        """The seeded fingerprints of the rows' prefixes of `prefix_length` bytes."""
        return prefix_fingerprints(rows, self.prefix_length, self.seed)

    def candidate_buckets(self, rows: np.ndarray) -> np.ndarray:
        """(C, k): h_j of every candidate row under every hash."""
        return buckets(self.fingerprints(rows)[:, None], self.salts[None, :], self.width)

    def perturb(self, values: Sequence[str] | np.ndarray, rng: np.random.Generator) -> Reports:
        rows = self.domain.encode(values)
        return self.perturb_rows(rows, rng)

    def perturb_rows(self, rows: np.ndarray, rng: np.random.Generator) -> Reports:
        """`perturb` for rows already encoded and validated by the domain."""
        n = rows.shape[0]
        reports = {c.name: np.empty((n, *c.row_shape()), dtype=c.dtype) for c in self.schema.columns}
        for start in range(0, n, _CHUNK_ROWS):  # chunks of devices, each vectorised
            chunk = slice(start, start + _CHUNK_ROWS)
            j = rng.integers(0, self.hashes, size=len(rows[chunk]))
            bucket = buckets(self.fingerprints(rows[chunk]), self.salts[j], self.width)
            reports["hash"][chunk] = j
            for name, column in self._sample(j, bucket, rng).items():
                reports[name][chunk] = column
        return reports

    def accumulate(self, reports: Reports) -> np.ndarray:
        n = check_report_batch(self.schema, reports)
        return np.append(self._cell_sums(reports), float(n))

    def _check_stats(self, stats: np.ndarray) -> tuple[np.ndarray, int]:
        return split_count(stats, self.stats_size)

    def z_table(self, stats: np.ndarray) -> tuple[np.ndarray, int]:
        """(k, m) T[j, b] = sum over devices with hash j of z(b), and n, from a statistics vector."""
        sums, n = self._check_stats(stats)
        return self._z_table(sums), n

    def candidate_cells(self, rows: np.ndarray) -> np.ndarray:
        """(C, k) flat indices j m + h_j(d) of every candidate's cells in a (k, m) table (computed once, scored
        many times)."""
        return self.candidate_buckets(rows) + np.arange(self.hashes, dtype=np.int64)[None, :] * self.width

    def score(self, table: np.ndarray, n: int, cells: np.ndarray, peeled: float = 0.0) -> np.ndarray:
        """f_hat = m/(m-1) (sum_j T[j, h_j(d)] / n - (1 - peeled)/m) for candidates with `cells` (C, k); `peeled` is
        the frequency mass already removed from the table (`peel`)."""
        m = self.width
        mean_z = np.take(table.ravel(), cells).sum(axis=1) / n
        return m / (m - 1) * (mean_z - (1 - peeled) / m)

    def peel(self, table: np.ndarray, n: int, known_cells: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The table without the expected contribution of known strings (n f(d) / k in cell (j, h_j(d))): a
        candidate scored on it (with `peeled` = sum of the values) is unbiased without their collisions."""
        out = np.array(table, dtype=np.float64)
        np.subtract.at(out.ravel(), known_cells, (n * np.asarray(values) / self.hashes)[:, None])
        return out

    def frequencies(self, stats: np.ndarray, rows: np.ndarray) -> Estimate:
        """Unbiased frequency (over the hashes' draw) of each candidate row, with the noise's standard error."""
        table, n = self.z_table(stats)
        if n == 0:
            return Estimate(n=0, value=np.full(rows.shape[0], np.nan), stderr=np.full(rows.shape[0], np.inf))
        value = self.score(table, n, self.candidate_cells(rows))
        return Estimate(n=n, value=value, stderr=self.stderr(value, n))

    def stderr(self, value: np.ndarray, n: int) -> np.ndarray:
        """The standard error of estimates `value` from n reports (closed form at the clipped estimate)."""
        return np.sqrt(self.variance(np.clip(value, 0.0, 1.0)) / n)

    def variance(self, frequencies: np.ndarray | float) -> np.ndarray:
        """n Var[f_hat] at true frequency f, averaged over the hashes' draw (noise only, module docstring)."""
        f = np.asarray(frequencies, dtype=np.float64)
        m, k = self.width, self.hashes
        rare = self.z_variance(1 / m, 1 / m**2 + (m - 1) / (m**2 * k))
        return (m / (m - 1)) ** 2 * (f * self.z_variance(1.0, 1.0) + (1 - f) * rare)

    def collision_variance(self, square_mass: float) -> float:
        """Var over the hashes' draw of the collision bias, for sum_{d' != d} f(d')^2 = square_mass."""
        return square_mass / ((self.width - 1) * self.hashes)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """The frequencies of the dictionary's strings (LDPError without a dictionary)."""
        if self._dictionary_rows is None:
            raise LDPError(f"{self.name}: estimating without candidates needs a dictionary")
        return self.frequencies(stats, self._dictionary_rows)

    def user_terms(self, reports: Reports, rows: np.ndarray) -> np.ndarray:
        """(n, C): each report's unbiased term m/(m-1) (z - 1/m) for each candidate; their mean is the estimate."""
        check_report_batch(self.schema, reports)
        j = np.asarray(reports["hash"], dtype=np.int64)
        m = self.width
        return m / (m - 1) * (self._z_terms(reports, self.candidate_buckets(rows)[:, j].T) - 1 / m)

    def collision_fractions(self, rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
        """(A, B): gamma(a, b), the fraction of the hashes on which rows a and b share a bucket."""
        return self._shared_cells(self.candidate_cells(rows_a), self.candidate_cells(rows_b))

    def _shared_cells(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(A, B) fraction of the k cells two candidates share, from their cells (C, k): one sort of all cells."""
        cells = np.concatenate([a.ravel(), b.ravel()])
        owner = np.concatenate([np.repeat(np.arange(a.shape[0]), a.shape[1]),
                                -1 - np.repeat(np.arange(b.shape[0]), b.shape[1])])
        order = np.argsort(cells, kind="stable")
        cells, owner = cells[order], owner[order]
        shared = np.zeros((a.shape[0], b.shape[0]))
        starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
        sizes = np.diff(np.r_[starts, cells.shape[0]])
        for size in np.unique(sizes[sizes > 1]):  # groups of equal cells, by size: a few distinct sizes
            members = owner[starts[sizes == size][:, None] + np.arange(size)[None, :]]
            left = members[:, :, None]
            right = members[:, None, :]
            pair = (left >= 0) & (right < 0)
            np.add.at(shared, (np.broadcast_to(left, pair.shape)[pair],
                               -1 - np.broadcast_to(right, pair.shape)[pair]), 1.0)
        return shared / self.hashes

    def joint_frequencies(self, table: np.ndarray, n: int, rows: np.ndarray, raw: np.ndarray) -> Estimate:
        """Candidates' estimates with the collision bias among them removed: E[f_hat_S] = A f_S + (strings outside
        S), A = I + m/(m-1) (Gamma - 1/m) off the diagonal (module docstring), so f_S = A^-1 f_hat_S, with standard
        errors sqrt(diag(A^-1 D A^-T)), D the raw estimates' variances (their covariances neglected)."""
        m = self.width
        coupling = m / (m - 1) * (self.collision_fractions(rows, rows) - 1 / m)
        np.fill_diagonal(coupling, 1.0)
        inverse = np.linalg.inv(coupling)
        value = inverse @ raw
        stderr = np.sqrt(np.einsum("ij,j,ij->i", inverse, self.stderr(raw, n) ** 2, inverse))
        return Estimate(n=n, value=value, stderr=stderr)

    def log_pmf(self, reports: Reports, values: Sequence[str] | np.ndarray) -> np.ndarray:
        """(n, C): log Pr[report | true string], exact up to rounding (epsilon-LDP: max - min over strings <= eps)."""
        return self.log_pmf_rows(reports, self.domain.encode(values))

    def log_pmf_rows(self, reports: Reports, rows: np.ndarray) -> np.ndarray:
        """`log_pmf` for candidate rows already encoded (the rows' first `prefix_length` bytes are hashed)."""
        check_report_batch(self.schema, reports)
        j = np.asarray(reports["hash"], dtype=np.int64)
        cand = self.candidate_buckets(rows)[:, j].T
        return -math.log(self.hashes) + self._log_pmf_given_hash(reports, cand)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon:g}, hashes={self.hashes}, width={self.width}, "
                f"prefix_length={self.prefix_length})")


class CMS(SketchOracle):
    """Apple's count-mean sketch: m bits per report, each flipped with probability 1/(1 + e^(eps/2)).

    Examples
    --------
    >>> domain = StringDomain(6, "abcdef")
    >>> cms = CMS(2.0, domain, hashes=16, width=256, seed=1, dictionary=["abc", "fed"])
    >>> reports = cms.perturb(["abc"] * 3200 + ["fed"] * 800, np.random.default_rng(0))
    >>> reports["bits"].shape
    (4000, 256)
    >>> [round(float(f), 1) for f in cms.estimate(cms.accumulate(reports)).value]
    [0.8, 0.2]
    """

    name: ClassVar[str] = "cms"
    auto_rank: ClassVar[int] = 30

    def __init__(self, epsilon: float, domain: StringDomain, hashes: int = 64, width: int = 1024, seed: int = 0,
                 prefix_length: int | None = None, dictionary: Sequence[str] | None = None) -> None:
        super().__init__(epsilon, domain, hashes, width, seed, prefix_length, dictionary)
        half = math.exp(self.epsilon / 2)
        self.flip = 1 / (1 + half)
        self.c = (half + 1) / (half - 1)

    @property
    def _columns(self) -> tuple[Column, ...]:
        return (Column("bits", "uint8", 0, 1, width=self.width),)

    @property
    def _sums_size(self) -> int:
        return self.hashes * self.width + self.hashes  # ones per (j, position), then reports per j

    def _sample(self, j: np.ndarray, bucket: np.ndarray, rng: np.random.Generator) -> Reports:
        bits = (rng.random((j.shape[0], self.width)) < self.flip).view(np.uint8)  # 1 = flipped from -1
        bits[np.arange(j.shape[0]), bucket] ^= 1
        return {"bits": bits}

    def _cell_sums(self, reports: Reports) -> np.ndarray:
        j = np.asarray(reports["hash"], dtype=np.intp)
        ones = np.zeros((self.hashes, self.width))
        np.add.at(ones, j, np.asarray(reports["bits"], dtype=np.float64))
        return np.concatenate([ones.ravel(), np.bincount(j, minlength=self.hashes).astype(np.float64)])

    def _z_table(self, sums: np.ndarray) -> np.ndarray:
        ones = sums[: self.hashes * self.width].reshape(self.hashes, self.width)
        per_hash = sums[self.hashes * self.width :][:, None]
        return (self.c * (2 * ones - per_hash) + per_hash) / 2  # sum of (c x + 1) / 2, x = 2 bit - 1

    def _z_terms(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        bits = np.take_along_axis(np.asarray(reports["bits"]), cand_buckets, axis=1).astype(np.float64)
        return (self.c * (2 * bits - 1) + 1) / 2

    def _log_pmf_given_hash(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        bits = np.asarray(reports["bits"])
        own = np.take_along_axis(bits, cand_buckets, axis=1).astype(np.int64)
        agree = self.width - bits.sum(axis=1, dtype=np.int64)[:, None] - 1 + 2 * own  # with the one-hot vector
        return agree * math.log(1 - self.flip) + (self.width - agree) * math.log(self.flip)

    def z_variance(self, gamma_mean: np.ndarray | float, gamma_square_mean: np.ndarray | float) -> np.ndarray:
        # (c^2 - (2 gamma - 1)^2) / 4, averaged over gamma
        return np.asarray((self.c**2 - 1 + 4 * np.asarray(gamma_mean) - 4 * np.asarray(gamma_square_mean)) / 4)


class HCMS(SketchOracle):
    """Apple's Hadamard count-mean sketch: one bit of a Hadamard row per report (width m a power of 2).

    Examples
    --------
    >>> domain = StringDomain(6, "abcdef")
    >>> hcms = HCMS(2.0, domain, hashes=8, width=64, seed=1, dictionary=["abc", "fed"])
    >>> reports = hcms.perturb(["abc"] * 32000 + ["fed"] * 8000, np.random.default_rng(0))
    >>> sorted(reports)
    ['bit', 'hash', 'row']
    >>> [round(float(f), 1) for f in hcms.estimate(hcms.accumulate(reports)).value]
    [0.8, 0.2]
    """

    name: ClassVar[str] = "hcms"
    auto_rank: ClassVar[int] = 20

    def __init__(self, epsilon: float, domain: StringDomain, hashes: int = 32, width: int = 1024, seed: int = 0,
                 prefix_length: int | None = None, dictionary: Sequence[str] | None = None) -> None:
        if isinstance(width, (int, np.integer)) and (width < 2 or width & (width - 1)):
            raise LDPError(f"HCMS width must be a power of 2, got {width}")
        super().__init__(epsilon, domain, hashes, width, seed, prefix_length, dictionary)
        e = math.exp(self.epsilon)
        self.keep = e / (e + 1)
        self.c = (e + 1) / (e - 1)

    @property
    def _columns(self) -> tuple[Column, ...]:
        return (Column("row", "uint32", 0, self.width - 1), Column("bit", "uint8", 0, 1))

    def _sample(self, j: np.ndarray, bucket: np.ndarray, rng: np.random.Generator) -> Reports:
        n: int = j.shape[0]
        rows = rng.integers(0, self.width, size=n, dtype=np.uint32)
        flip = (rng.random(n) >= self.keep).view(np.uint8)
        return {"row": rows, "bit": hadamard_bit(rows, bucket) ^ flip}

    def _cell_sums(self, reports: Reports) -> np.ndarray:
        cell = np.asarray(reports["hash"], dtype=np.intp) * self.width + np.asarray(reports["row"], dtype=np.intp)
        signs = 2.0 * np.asarray(reports["bit"], dtype=np.float64) - 1.0
        return np.bincount(cell, weights=signs, minlength=self._sums_size)

    def _z_table(self, sums: np.ndarray) -> np.ndarray:
        signed = sums.reshape(self.hashes, self.width)
        return self.c * np.stack([walsh_hadamard_transform(row) for row in signed])  # loop over hash functions

    def _z_terms(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        signs = 2.0 * np.asarray(reports["bit"], dtype=np.float64) - 1.0
        h = 2.0 * hadamard_bit(np.asarray(reports["row"])[:, None], cand_buckets) - 1.0
        return self.c * signs[:, None] * h

    def _log_pmf_given_hash(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        same = hadamard_bit(np.asarray(reports["row"])[:, None], cand_buckets) == np.asarray(reports["bit"])[:, None]
        return -math.log(self.width) + np.where(same, math.log(self.keep), math.log(1 - self.keep))

    def z_variance(self, gamma_mean: np.ndarray | float, gamma_square_mean: np.ndarray | float) -> np.ndarray:
        del gamma_mean  # z^2 = c^2: only E[gamma^2] enters
        return np.asarray(self.c**2 - np.asarray(gamma_square_mean))


class HashedGRR(SketchOracle):
    """Randomized response over g = round(e^eps) + 1 hashed buckets with k fixed public hashes: OLH (004) whose
    hash is drawn from a public family of k, so that its statistics (k x g counts) add.

    Examples
    --------
    >>> domain = StringDomain(6, "abcdef")
    >>> grr = HashedGRR(2.0, domain, hashes=64, seed=1, dictionary=["abc", "fed"])
    >>> grr.width  # g = round(e^2) + 1
    8
    >>> reports = grr.perturb(["abc"] * 32000 + ["fed"] * 8000, np.random.default_rng(0))
    >>> [round(float(f), 1) for f in grr.estimate(grr.accumulate(reports)).value]
    [0.8, 0.2]
    """

    name: ClassVar[str] = "hashed_grr"
    auto_rank: ClassVar[int] = 10

    def __init__(self, epsilon: float, domain: StringDomain, hashes: int | None = None, width: int | None = None,
                 seed: int = 0, prefix_length: int | None = None, dictionary: Sequence[str] | None = None) -> None:
        eps = check_frequency_epsilon(epsilon)
        g = math.floor(math.exp(eps) + 0.5) + 1 if width is None else width  # 004, OLH: g = e^eps + 1
        # k g ~ 2^16 cells like HCMS's, at most 128 hashes (decoding gathers a cell per candidate and hash)
        k = min(128, max(16, (1 << 16) // max(g, 1))) if hashes is None else hashes
        super().__init__(eps, domain, k, g, seed, prefix_length, dictionary)
        e = math.exp(self.epsilon)
        self.p = e / (e + self.width - 1)
        self.q = (1 - self.p) / (self.width - 1)

    @property
    def _columns(self) -> tuple[Column, ...]:
        return (Column("y", "uint32", 0, self.width - 1),)

    def _sample(self, j: np.ndarray, bucket: np.ndarray, rng: np.random.Generator) -> Reports:
        return {"y": randomized_response(bucket, self.width, self.p, rng)}

    def _cell_sums(self, reports: Reports) -> np.ndarray:
        cell = np.asarray(reports["hash"], dtype=np.intp) * self.width + np.asarray(reports["y"], dtype=np.intp)
        return np.bincount(cell, minlength=self._sums_size).astype(np.float64)

    def _z_table(self, sums: np.ndarray) -> np.ndarray:
        counts = sums.reshape(self.hashes, self.width)
        return (counts - counts.sum(axis=1, keepdims=True) * self.q) / (self.p - self.q)

    def _z_terms(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        hit = cand_buckets == np.asarray(reports["y"], dtype=np.int64)[:, None]
        return (hit - self.q) / (self.p - self.q)

    def _log_pmf_given_hash(self, reports: Reports, cand_buckets: np.ndarray) -> np.ndarray:
        hit = cand_buckets == np.asarray(reports["y"], dtype=np.int64)[:, None]
        return np.where(hit, math.log(self.p), math.log(self.q))

    def z_variance(self, gamma_mean: np.ndarray | float, gamma_square_mean: np.ndarray | float) -> np.ndarray:
        p, q = self.p, self.q
        g1, g2 = np.asarray(gamma_mean), np.asarray(gamma_square_mean)
        # E[pi (1 - pi)] for pi = q + (p - q) gamma
        mean_pi = q + (p - q) * g1
        mean_pi2 = q**2 + 2 * q * (p - q) * g1 + (p - q) ** 2 * g2
        return np.asarray((mean_pi - mean_pi2) / (p - q) ** 2)
