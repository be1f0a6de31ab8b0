"""Hierarchical histograms for range queries (Cormode, Kulkarni, Srivastava, "Answering Range Queries Under Local
Differential Privacy", PVLDB 12(10), 2019; "Cormode et al." below), with Hadamard randomized response at every level.

The grid's d = B^h bins are the leaves of a B-ary tree (fan-out B, `fanout`); level l (1..h) has B^l nodes, each the
union of B^(h - l) consecutive bins, and the root (level 0) is the whole interval, whose frequency 1 is known. A device
draws a level uniformly and reports the node of that level that holds its value by a frequency oracle at the full
eps: Cormode et al. (Sec. 4) show that sampling the level beats splitting eps over the levels. The oracle is Hadamard
randomized response (HRR, their Sec. 3; `ldpstream.mechanisms.frequency.hadamard`): a row s uniform over m (the
power of two >= d, shared by every level) and the bit H[s, node] kept with probability p = e^eps / (e^eps + 1). Its
report has the same three fields at every level, {"level", "row", "bit"}, and a level's statistics are one
Walsh-Hadamard transform of its signed bits per row.

Estimates (derived here): with c = (e^eps + 1) / (e^eps - 1), y_l(v) = c / n_l sum_{j at level l} H[s_j, v] b_j is
unbiased for the frequency f_l(v) of node v, and, for devices drawn from a distribution f, Cov(y_l) = (c^2 I -
f_l f_l^T) / n_l (E[c^2 H[s, v] H[s, v']] = c^2 1{v = v'} over the uniform row), independent across levels. The
frequencies are made consistent (every node the sum of its children, the root 1) by weighted least squares with the
per-level weights n_l / c^2, computed exactly by the two passes of Hay, Rastogi, Miklau and Suciu (PVLDB 2010) that
Cormode et al. apply (Sec. 4.3), here with per-level variances: upward, each node's estimate from its own subtree
(its own y and its children's, by inverse variance); downward, from the root's known 1, each node's surplus split
evenly among its children (their variances are equal). The leaves x are then linear in y, x = L y + 1/d, so every
range probability (a sum of leaves) is unbiased with the exact variance of `ldpstream.mechanisms.distribution.base`,
from Cov(y) above at the plug-in f (the consistent x, clipped at 0). The density shown is x after Norm-Sub
(non-negative, summing to 1; `ldpstream.mechanisms.postprocess.norm_sub`); the CDF, range probabilities and the mean
are those of x itself. The mean is that of the bins' centres, within half a bin of the values' mean (1 / d on [-1, 1]).

Privacy: the level and the row do not depend on the value, and given them the bit is randomized response on
H[s, node], so Pr[report | t] / Pr[report | t'] <= p / (1 - p) = e^eps (`log_pmf` gives the exact probabilities).

Statistics: per level, n_l then the B^l transformed sums sum_j H[s_j, v] b_j (additive).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Reports, ReportSchema
from ldpstream.mechanisms.distribution.base import (
    Distribution,
    DistributionMechanism,
    NoiseCovariance,
    check_bins,
    check_distribution_epsilon,
)
from ldpstream.mechanisms.frequency.base import check_report_batch
from ldpstream.mechanisms.frequency.hadamard import hadamard_bit, walsh_hadamard_transform
from ldpstream.mechanisms.numeric.base import check_unit_values
from ldpstream.mechanisms.postprocess import norm_sub

DEFAULT_BINS, DEFAULT_FANOUT = 64, 4
MAX_FANOUT = 16
METHOD = "hh"
STDERR_METHOD = "exact: the consistent leaves are linear in the levels' unbiased estimates (plug-in covariance)"


class HierarchicalHistogram(DistributionMechanism):
    """Hierarchical histogram over `bins` = fanout^h bins of [-1, 1], HRR at a uniformly drawn level (module
    docstring): reports {"level": uint8, "row": uint32, "bit": uint8}.

    Examples
    --------
    >>> import numpy as np
    >>> mech = HierarchicalHistogram(1.0, bins=16, fanout=4)
    >>> mech.height, mech.stats_size
    (2, 22)
    >>> rng = np.random.default_rng(0)
    >>> stats = mech.accumulate(mech.perturb(rng.uniform(-1.0, 0.0, 50_000), rng))
    >>> low, se = mech.distribution(stats).range_probability(-1.0, 0.0)
    >>> bool(abs(low - 1.0) < 4 * se)
    True
    """

    name: ClassVar[str] = "hh"
    auto_rank: ClassVar[int] = 20

    def __init__(self, epsilon: float, bins: int = DEFAULT_BINS, fanout: int = DEFAULT_FANOUT) -> None:
        self.epsilon = check_distribution_epsilon(epsilon)
        self.bins = check_bins(bins)
        if isinstance(fanout, bool) or not isinstance(fanout, int | np.integer) or not 2 <= fanout <= MAX_FANOUT:
            raise LDPError(f"fanout must be an integer in [2, {MAX_FANOUT}], got {fanout!r}")
        self.fanout = int(fanout)
        self.height = round(math.log(self.bins, self.fanout))
        if self.fanout**self.height != self.bins:
            raise LDPError(f"bins must be a power of the fanout {self.fanout}, got {self.bins}")

    @classmethod
    def parameter_names(cls) -> tuple[str, ...]:
        return ("bins", "fanout")

    @property
    def sizes(self) -> list[int]:
        """The number of nodes of levels 1..h: B, B^2, ..., B^h = bins."""
        return [self.fanout**level for level in range(1, self.height + 1)]

    @property
    def rows(self) -> int:
        """m: the Hadamard rows, the power of two >= bins (every level's nodes are codes below it)."""
        return 1 << (self.bins - 1).bit_length()

    @cached_property
    def p(self) -> float:
        """P[the bit is H[s, node]] = e^eps / (e^eps + 1) (HRR)."""
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + 1.0)

    @property
    def c(self) -> float:
        """(e^eps + 1) / (e^eps - 1) = 1 / (2 p - 1): E[c H[s, v] b] = 1{v = node}."""
        return 1.0 / (2.0 * self.p - 1.0)

    # --- reports ------------------------------------------------------------------------------------------
    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("level", "uint8", 1, self.height), Column("row", "uint32", 0, self.rows - 1),
                             Column("bit", "uint8", 0, 1)))

    def leaves(self, t: np.ndarray) -> np.ndarray:
        """The bin of each value t in [-1, 1] (the last bin includes 1)."""
        return np.clip(np.floor((t + 1.0) / 2.0 * self.bins), 0, self.bins - 1).astype(np.int64)

    def perturb(self, values: np.ndarray | float | list[float], rng: np.random.Generator) -> Reports:
        t = check_unit_values(values)
        return self.from_uniforms(t, rng.random((3, t.shape[0])))

    def from_uniforms(self, t: np.ndarray, u: np.ndarray) -> Reports:
        """The reports of values t in [-1, 1] from three uniforms in [0, 1) each, u (3, n) (what another SDK
        reproduces, tests/vectors/distribution.json): level 1 + floor(u_0 h), row floor(u_1 m), and the bit
        H[row, node] kept when u_2 < p."""
        level = 1 + np.minimum(np.floor(u[0] * self.height), self.height - 1).astype(np.int64)
        row = np.minimum(np.floor(u[1] * self.rows), self.rows - 1).astype(np.uint32)
        node = self.leaves(np.asarray(t, dtype=np.float64)) // self.fanout ** (self.height - level)
        flip = (u[2] >= self.p).astype(np.uint8)
        return {"level": level.astype(np.uint8), "row": row, "bit": hadamard_bit(row, node) ^ flip}

    def log_pmf(self, reports: Reports, values: np.ndarray | float | list[float]) -> np.ndarray:
        """(n, len(values)): log Pr[report j | true value values[i]], exact (epsilon-LDP: max - min <= eps)."""
        check_report_batch(self.schema, reports)
        leaves = self.leaves(check_unit_values(values))
        level = np.asarray(reports["level"], dtype=np.int64)[:, None]
        node = leaves[None, :] // self.fanout ** (self.height - level)
        same = hadamard_bit(np.asarray(reports["row"])[:, None], node) == np.asarray(reports["bit"])[:, None]
        return -math.log(self.height * self.rows) + np.where(same, math.log(self.p), math.log(1.0 - self.p))

    # --- statistics ---------------------------------------------------------------------------------------
    @property
    def stats_size(self) -> int:
        return sum(1 + size for size in self.sizes)

    def accumulate(self, reports: Reports) -> np.ndarray:
        check_report_batch(self.schema, reports)
        level = np.asarray(reports["level"])
        rows = np.asarray(reports["row"], dtype=np.intp)
        signs = 2.0 * np.asarray(reports["bit"], dtype=np.float64) - 1.0
        blocks = []
        for index, size in enumerate(self.sizes, start=1):
            here = level == index
            per_row = np.bincount(rows[here], weights=signs[here], minlength=self.rows)
            blocks.append(np.concatenate([[here.sum()], walsh_hadamard_transform(per_row)[:size]]))
        return np.concatenate(blocks).astype(np.float64)

    def _levels(self, stats: np.ndarray) -> list[tuple[float, np.ndarray]]:
        """(n_l, y_l) per level: the reports and the unbiased node frequencies (zeros where n_l = 0)."""
        s = np.asarray(stats, dtype=np.float64)
        if s.shape != (self.stats_size,) or not np.isfinite(s).all():
            raise LDPError(f"statistics must be {self.stats_size} finite numbers, got shape {s.shape}")
        out, start = [], 0
        for size in self.sizes:
            n_l, sums = s[start], s[start + 1:start + 1 + size]
            if n_l < 0 or n_l != math.floor(n_l) or np.any(np.abs(sums) > n_l):
                raise LDPError("statistics are not those of a batch of reports (a count below |a sum|)")
            out.append((n_l, self.c * sums / n_l if n_l > 0 else np.zeros(size)))
            start += 1 + size
        return out

    # --- consistency (Hay et al. 2010, as in Cormode et al. Sec. 4.3) ----------------------------------------
    def _consistent(self, ys: list[np.ndarray], variances: np.ndarray, root: float) -> np.ndarray:
        """The consistent leaves from per-level node estimates ys[l] (each (B^(l+1), k): k columns at once) with
        per-level variances (inf: unobserved) and the root's value (module docstring: the two passes)."""
        b, h = self.fanout, self.height
        subtree = [np.zeros_like(y) for y in ys]
        subtree_var = np.full(h, np.inf)
        subtree[-1], subtree_var[-1] = ys[-1], variances[-1]
        for level in range(h - 2, -1, -1):  # upward: own estimate and the children's sum, by inverse variance
            children = subtree[level + 1].reshape(-1, b, *ys[level].shape[1:]).sum(axis=1)
            own, below = 1.0 / variances[level], 1.0 / (b * subtree_var[level + 1])
            if own + below > 0:
                subtree[level] = (own * ys[level] + below * children) / (own + below)
                subtree_var[level] = 1.0 / (own + below)
        final = np.full((1, *ys[0].shape[1:]), root)
        for level in range(h):  # downward: the parent's surplus over its children, split evenly
            nodes = subtree[level].reshape(-1, b, *ys[level].shape[1:])
            surplus = (final - nodes.sum(axis=1)) / b
            final = (nodes + surplus[:, None]).reshape(ys[level].shape)
        return final

    def _leaf_map(self, counts: np.ndarray) -> np.ndarray:
        """L: (bins, total nodes), the consistent leaves' linear part for these per-level report counts."""
        variances = np.where(counts > 0, self.c**2 / np.maximum(counts, 1.0), np.inf)
        total = sum(self.sizes)
        eye = np.eye(total)
        starts = np.cumsum([0, *self.sizes])
        return self._consistent([eye[a:z] for a, z in zip(starts[:-1], starts[1:], strict=True)], variances, 0.0)

    def distribution(self, stats: np.ndarray) -> Distribution:
        """Consistent leaves, their exact covariance at the plug-in frequencies (module docstring)."""
        levels = self._levels(stats)
        counts = np.array([n_l for n_l, _ in levels])
        if counts.sum() <= 0:
            raise LDPError("no reports: no distribution to estimate")
        leaf_map = self._leaf_map(counts)
        x = leaf_map @ np.concatenate([y for _, y in levels]) + 1.0 / self.bins
        rows = np.zeros((self.bins + 1, leaf_map.shape[1]))
        np.cumsum(leaf_map, axis=0, out=rows[1:])
        plug_in = np.maximum(x, 0.0)
        diagonal, low_rank, start = [], np.zeros((leaf_map.shape[1], self.height)), 0
        for index, ((n_l, _), size) in enumerate(zip(levels, self.sizes, strict=True)):
            scale = 1.0 / n_l if n_l > 0 else 0.0  # an unobserved level enters with weight 0 (no rows depend on it)
            diagonal.append(np.full(size, self.c**2 * scale))
            low_rank[start:start + size, index] = plug_in.reshape(size, -1).sum(axis=1) * math.sqrt(scale)
            start += size
        cdf = np.concatenate([[0.0], np.cumsum(x)])
        return Distribution(METHOD, int(counts.sum()), self.edges, norm_sub(x), cdf, rows,
                            NoiseCovariance(np.concatenate(diagonal), low_rank), STDERR_METHOD,
                            {"fanout": self.fanout, "levels": self.height, "reports_per_level": counts.tolist()})

    # --- the mean -----------------------------------------------------------------------------------------
    def estimate(self, stats: np.ndarray) -> Estimate:
        """The mean of the bins' centres (within 1 / bins of the values' mean), unbiased, with its exact variance."""
        if sum(n_l for n_l, _ in self._levels(stats)) == 0:
            return Estimate(n=0, value=np.asarray(np.nan), stderr=np.asarray(np.inf))
        dist = self.distribution(stats)
        mean, stderr = dist.mean()
        return Estimate(n=dist.n, value=np.asarray(mean), stderr=np.asarray(stderr))

    def second_moment(self, stats: np.ndarray) -> float:
        """sum of the consistent (Norm-Sub) bin masses times E[t^2] over each bin: centre^2 + width^2 / 12."""
        dist = self.distribution(stats)
        centres = (dist.edges[1:] + dist.edges[:-1]) / 2.0
        return float(np.clip(dist.probabilities @ (centres**2 + dist.widths**2 / 12.0), 0.0, 1.0))

    def worst_case_variance(self) -> float:
        """n Var of the mean with n / h reports per level, without the -f_l f_l^T / n_l terms (which only lower it)."""
        leaf_map = self._leaf_map(np.ones(self.height))
        centres = (self.edges[1:] + self.edges[:-1]) / 2.0
        return float(self.height * self.c**2 * np.sum((centres @ leaf_map) ** 2))

    def __repr__(self) -> str:
        return f"HierarchicalHistogram(epsilon={self.epsilon:g}, bins={self.bins}, fanout={self.fanout})"
