"""Heavy hitters over an open domain of strings: a prefix tree of additive sketches, decoded breadth-first.

The structure of TreeHist (Bassily, Nissim, Stemmer, Thakurta, NeurIPS 2017) and of PEM (Wang, Li, Jha et al.,
"Locally differentially private heavy hitter identification", TDSC 2019): the padded string's prefixes of lengths
l_1 < l_2 < ... < l_T = max_length (`step` bytes more per level) form the levels of a tree. Each device is assigned
one level uniformly at random and reports its prefix of that length with the level's sketch oracle at the full
epsilon: users are partitioned across levels, the budget is never split (004, "partition users rather than split
the budget"). A report is (level, the oracle's report); the statistics are the concatenation of the levels'
sketches, so they add across batches, workers and windows.

Decoding (on read, `heavy_hitters`): the candidates of level 1 are every prefix of l_1 bytes; at each level the
candidates are scored by that level's sketch, the `beam` best kept and extended by every suffix of `step` bytes
(after a terminator only terminators); the last level's best `top` are the heavy hitters, each with its unbiased
frequency estimate and standard error from that level's sketch (its n_T devices are a uniform sample of all, so
the estimate is unbiased for the population; n Var is that of the oracle with n = n_T ~ n / T).

- `hcms_tree` (`HCMSTree`): Apple's HCMS at every level (one bit per report), beam 2 x top (TreeHist keeps every
  node above a threshold; a beam bounds the decoder's work).
- `pem` (`PEM`): PEM's prefix extension, keeping exactly `top` candidates per level (Wang et al., Sec. 4), with
  OLH's randomized response on a hashed bucket (g = round(e^eps) + 1) from a fixed public family of hashes so that
  the statistics add (`HashedGRR`); PEM's own OLH draws a private hash per report, whose reports would all have
  to be kept.
HCMS's rare-item n Var ~ ((e^eps + 1)/(e^eps - 1))^2 is never below hashed GRR's ~ 4 e^eps/(e^eps - 1)^2
(4 e^eps <= (e^eps + 1)^2), and above eps ~ 2 it is many times larger (one bit per report, n Var >= 1); what HCMS
buys is a report of one bit and a sketch whose size does not grow with e^eps. `choose_heavy_hitters` picks by the
variance.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import check_frequency_epsilon, check_report_batch
from ldpstream.mechanisms.open_domain.sketch import HCMS, HashedGRR, SketchOracle
from ldpstream.mechanisms.open_domain.strings import StringDomain

MAX_EXTENSIONS = 1 << 12  # suffixes per candidate and level: (symbols + 1)^step
MAX_CANDIDATES = 1 << 21  # candidates scored at one level (beam x extensions)
JOINT_FACTOR = 2  # candidates re-estimated jointly per level: this many times those kept
MIN_JOINT = 256
# A - I's entries m/(m-1) (gamma - 1/m) have variance 1 / ((m - 1) k) over the hashes; the norm of s x s such is
# about 2 sqrt(s / ((m - 1) k)), at most 1/2 for a joint set of s <= (m - 1) k / 16: A well conditioned
CONDITIONING = 16
SIGNIFICANT = 3.0  # leaders are estimates this many standard errors above 0 (a joint set of noise amplifies it)
MAX_JOINT = 1024
PEEL_ROUNDS = 2


@dataclass(frozen=True)
class HeavyHitters(Estimate):
    """The `top` strings with the largest estimated frequencies (value), their standard errors, from n reports."""

    items: tuple[str, ...] = ()

    def to_rows(self) -> list[dict[str, object]]:
        """[{"item", "estimate", "stderr"}] from the largest estimate down."""
        return [
            {"item": item, "estimate": float(v), "stderr": float(s)}
            for item, v, s in zip(self.items, self.value, self.stderr, strict=True)
        ]


class LevelCap(Protocol):
    """What each candidate's estimate counts for at a level of the decode (a poisoning defence,
    `ldpstream.mechanisms.poisoning.heavy`: at most what an honest window shows, a suspect's reference frequency);
    the decoder ranks by it."""

    def __call__(self, level: int, candidates: np.ndarray, value: np.ndarray, n: int, keep: int) -> np.ndarray:
        """The candidates' (rows) estimates `value` at `level` (from n reports, `keep` of them to be kept), as the
        decoder ranks them."""
        ...


def default_step(domain: StringDomain) -> int:
    """The most bytes per level (at most max_length) whose extensions, (symbols + 1)^step, stay within 1024."""
    alphabet = domain.symbols.shape[0] + 1
    return min(domain.max_length, max(1, int(math.floor(math.log(1024) / math.log(alphabet) + 1e-9))))


def suffixes(domain: StringDomain, step: int) -> np.ndarray:
    """(S, step) uint8: every extension of `step` bytes of a string that has not ended (a terminator 0 is followed
    only by terminators)."""
    symbols = np.concatenate([domain.symbols, [0]]).astype(np.uint8)
    grid = np.stack(np.meshgrid(*([symbols] * step), indexing="ij"), axis=-1).reshape(-1, step)
    ended = np.maximum.accumulate(grid == 0, axis=1)
    return grid[~(ended & (grid != 0)).any(axis=1)]


def peeled_estimates(oracle: SketchOracle, table: np.ndarray, n: int, cand: np.ndarray,
                     keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate's estimate and stderr, the leaders' jointly (`joint_frequencies`) and the others' on the
    table without the leaders (`peel`), so that a string colliding with a frequent one is not ranked by it;
    PEEL_ROUNDS rounds, the leaders re-chosen each round."""
    value, stderr, _ = peeled_leaders(oracle, table, n, cand, keep)
    return value, stderr


def peeled_leaders(oracle: SketchOracle, table: np.ndarray, n: int, cand: np.ndarray,
                   keep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`peeled_estimates`, and the indices of the last round's leaders."""
    raw = oracle.score(table, n, oracle.candidate_cells(cand))
    value, stderr = raw, oracle.stderr(raw, n)
    conditioned = max(1, (oracle.width - 1) * oracle.hashes // CONDITIONING)
    joint_size = min(max(JOINT_FACTOR * keep, MIN_JOINT), MAX_JOINT, conditioned)
    leaders = np.zeros(0, dtype=np.int64)
    for _ in range(PEEL_ROUNDS):
        leaders = np.argsort(-value, kind="stable")[:joint_size]
        leaders = leaders[: max(1, int(np.count_nonzero(value[leaders] > SIGNIFICANT * stderr[leaders])))]
        value, stderr = peeled_with(oracle, table, n, cand, leaders)
    return value, stderr, leaders


def peeled_with(oracle: SketchOracle, table: np.ndarray, n: int, cand: np.ndarray,
                leaders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate's estimate and stderr with the given `leaders` (indices into `cand`) estimated jointly and
    peeled from the table (one round of `peeled_estimates`): a linear function of table / n, so two tables of one
    population estimated with the same leaders have the same expectation."""
    cells = oracle.candidate_cells(cand)
    raw = oracle.score(table, n, cells)
    joint = oracle.joint_frequencies(table, n, cand[leaders], raw[leaders])
    peeled = oracle.peel(table, n, cells[leaders], joint.value)
    value = oracle.score(peeled, n, cells, peeled=float(joint.value.sum()))
    stderr = oracle.stderr(value, n)
    value[leaders], stderr[leaders] = joint.value, joint.stderr
    return value, stderr


class PrefixTree(Mechanism):
    """A prefix tree of sketch oracles (module docstring). Reports: "level" (uint8) and the oracle's columns."""

    auto_rank: ClassVar[int]

    def __init__(self, epsilon: float, domain: StringDomain, seed: int = 0, step: int | None = None,
                 top: int = 20, beam: int | None = None) -> None:
        self.epsilon = check_frequency_epsilon(epsilon)
        self.domain = domain
        self.step = default_step(domain) if step is None else int(step)
        if not 1 <= self.step <= domain.max_length:
            raise LDPError(f"step must be in [1, {domain.max_length}], got {step!r}")
        if (domain.symbols.shape[0] + 1) ** self.step > MAX_EXTENSIONS:
            raise LDPError(f"step {self.step} gives more than {MAX_EXTENSIONS} extensions per candidate")
        if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
            raise LDPError(f"top must be a positive integer, got {top!r}")
        self.top = int(top)
        self.beam = self.default_beam(self.top) if beam is None else int(beam)
        if self.beam < 1 or self.beam * (domain.symbols.shape[0] + 1) ** self.step > MAX_CANDIDATES:
            raise LDPError(f"beam {self.beam} is not in [1, {MAX_CANDIDATES} / extensions]")
        self.seed = int(seed)
        ends = range(self.step, domain.max_length + self.step, self.step)
        self.lengths = tuple(min(end, domain.max_length) for end in ends)
        self.oracles = tuple(self.level_oracle(length, (self.seed * 1_000_003 + t) % (1 << 64))
                             for t, length in enumerate(self.lengths))
        self._offsets = np.cumsum([0] + [o.stats_size for o in self.oracles])

    @abstractmethod
    def level_oracle(self, prefix_length: int, seed: int) -> SketchOracle:
        """The sketch oracle of the level whose prefixes have `prefix_length` bytes."""

    @abstractmethod
    def default_beam(self, top: int) -> int:
        """Candidates kept per level when none is given."""

    @property
    def levels(self) -> int:
        return len(self.lengths)

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("level", "uint8", 0, self.levels - 1), *self.oracles[0].schema.columns))

    @property
    def stats_size(self) -> int:
        return int(self._offsets[-1])

    def perturb(self, values: Sequence[str] | np.ndarray, rng: np.random.Generator) -> Reports:
        rows = self.domain.encode(values)
        n = rows.shape[0]
        level = rng.integers(0, self.levels, size=n).astype(np.uint8)
        reports = {c.name: np.empty((n, *c.row_shape()), dtype=c.dtype) for c in self.schema.columns}
        reports["level"][:] = level
        for t, oracle in enumerate(self.oracles):  # loop over levels, vectorised over their devices
            mine = np.flatnonzero(level == t)
            for name, column in oracle.perturb_rows(rows[mine], rng).items():
                reports[name][mine] = column
        return reports

    def _split(self, reports: Reports) -> list[Reports]:
        level = np.asarray(reports["level"])
        picks = [np.flatnonzero(level == t) for t in range(self.levels)]
        return [{k: np.asarray(v)[rows] for k, v in reports.items() if k != "level"} for rows in picks]

    def accumulate(self, reports: Reports) -> np.ndarray:
        check_report_batch(self.schema, reports)
        return np.concatenate([o.accumulate(part) for o, part in zip(self.oracles, self._split(reports), strict=True)])

    def level_stats(self, stats: np.ndarray, level: int) -> np.ndarray:
        """The statistics of one level's sketch."""
        s = np.asarray(stats, dtype=np.float64)
        if s.shape != (self.stats_size,):
            raise LDPError(f"statistics must have shape ({self.stats_size},), got {s.shape}")
        return s[self._offsets[level] : self._offsets[level + 1]]

    def first_candidates(self) -> np.ndarray:
        """(C, max_length) rows: every prefix of the first level's length (the string's first byte is not 0)."""
        first = suffixes(self.domain, self.lengths[0])
        first = first[first[:, 0] != 0]
        rows = np.zeros((first.shape[0], self.domain.max_length), dtype=np.uint8)
        rows[:, : self.lengths[0]] = first
        return rows

    def extend(self, rows: np.ndarray, level: int) -> np.ndarray:
        """Every extension of the rows (prefixes of level `level`) to the next level's length."""
        start, end = self.lengths[level], self.lengths[level + 1]
        tails = suffixes(self.domain, end - start)
        ended = rows[:, start - 1] == 0
        open_rows = rows[~ended]
        grown = np.repeat(open_rows, tails.shape[0], axis=0)
        grown[:, start:end] = np.tile(tails, (open_rows.shape[0], 1))
        return np.concatenate([grown, rows[ended]])  # an ended string's only extension is more terminators

    def heavy_hitters(self, stats: np.ndarray, top: int | None = None, cap: LevelCap | None = None) -> HeavyHitters:
        """The `top` strings with the largest estimates, decoded breadth-first (module docstring); with `cap`, every
        level ranks (and the last reports) the candidates' estimates as it gives them."""
        top = self.top if top is None else top
        cand = self.first_candidates()
        for t, oracle in enumerate(self.oracles):
            table, n = oracle.z_table(self.level_stats(stats, t))
            if n == 0:
                return HeavyHitters(n=0, value=np.zeros(0), stderr=np.zeros(0))
            keep = top if t == self.levels - 1 else self.beam
            value, stderr = peeled_estimates(oracle, table, n, cand, keep)
            if cap is not None:
                value = cap(t, cand, value, n, keep)
            order = np.argsort(-value, kind="stable")[:keep]
            if t < self.levels - 1:
                cand = self.extend(cand[order], t)
        return HeavyHitters(n=int(np.asarray(stats)[self._offsets[1:] - 1].sum()), value=value[order],
                            stderr=stderr[order], items=tuple(self.domain.decode(cand[order])))

    def estimate(self, stats: np.ndarray) -> HeavyHitters:
        """The current top `top` heavy hitters (`heavy_hitters`)."""
        return self.heavy_hitters(stats)

    def frequencies(self, stats: np.ndarray, values: Sequence[str] | np.ndarray) -> Estimate:
        """Unbiased frequencies of given strings from the last level's sketch."""
        return self.oracles[-1].frequencies(self.level_stats(stats, self.levels - 1), self.domain.encode(values))

    def log_pmf(self, reports: Reports, values: Sequence[str] | np.ndarray) -> np.ndarray:
        """(n, C): log Pr[report | true string]: the level's 1/T times its oracle's probability of the prefix."""
        check_report_batch(self.schema, reports)
        rows = self.domain.encode(values)
        level = np.asarray(reports["level"])
        out = np.empty((level.shape[0], rows.shape[0]))
        for t, (oracle, part) in enumerate(zip(self.oracles, self._split(reports), strict=True)):
            out[level == t] = oracle.log_pmf(part, rows) - math.log(self.levels)
        return out

    def worst_case_variance(self) -> float:
        """n Var of a rare string's estimate over all n devices (T levels: the last sees n / T of them)."""
        return self.levels * float(self.oracles[-1].variance(0.0))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g}, levels={self.lengths}, beam={self.beam})"


class HCMSTree(PrefixTree):
    """A prefix tree of HCMS sketches (module docstring).

    Examples
    --------
    >>> tree = HCMSTree(4.0, StringDomain(4, "abc"), seed=7, top=2)
    >>> tree.lengths, tree.levels
    ((4,), 1)
    >>> population = ["abca"] * 6000 + ["cab"] * 3000 + ["b"] * 1000
    >>> stats = tree.accumulate(tree.perturb(population, np.random.default_rng(0)))
    >>> found = tree.heavy_hitters(stats)
    >>> list(found.items), [round(float(v), 1) for v in found.value]
    (['abca', 'cab'], [0.6, 0.3])
    """

    name: ClassVar[str] = "hcms_tree"
    auto_rank: ClassVar[int] = 20

    def level_oracle(self, prefix_length: int, seed: int) -> SketchOracle:
        return HCMS(self.epsilon, self.domain, hashes=64, width=1024, seed=seed, prefix_length=prefix_length)

    def default_beam(self, top: int) -> int:
        return 2 * top


class PEM(PrefixTree):
    """PEM's prefix extension over hashed-GRR sketches, `top` candidates kept per level (module docstring).

    Examples
    --------
    >>> pem = PEM(4.0, StringDomain(6, "abc"), seed=7, step=2, top=2)
    >>> pem.lengths, pem.oracles[0].width  # g = round(e^4) + 1
    ((2, 4, 6), 56)
    >>> population = ["abcabc"] * 60000 + ["cab"] * 30000 + ["b"] * 10000
    >>> found = pem.heavy_hitters(pem.accumulate(pem.perturb(population, np.random.default_rng(0))))
    >>> list(found.items), [round(float(v), 1) for v in found.value]
    (['abcabc', 'cab'], [0.6, 0.3])
    """

    name: ClassVar[str] = "pem"
    auto_rank: ClassVar[int] = 10

    def level_oracle(self, prefix_length: int, seed: int) -> SketchOracle:
        return HashedGRR(self.epsilon, self.domain, seed=seed, prefix_length=prefix_length)

    def default_beam(self, top: int) -> int:
        return top


def choose_heavy_hitters(epsilon: float) -> str:
    """`auto` for a string attribute: the tree whose oracle has the smaller rare-string variance at epsilon (a tie
    goes to the lower `auto_rank`); that is PEM's hashed GRR at every epsilon (module docstring).

    Examples
    --------
    >>> choose_heavy_hitters(0.5), choose_heavy_hitters(4.0)
    ('pem', 'pem')
    """
    domain = StringDomain(1)
    trees = sorted((HCMSTree(epsilon, domain), PEM(epsilon, domain)), key=lambda tree: tree.auto_rank)
    return min(trees, key=lambda tree: tree.worst_case_variance()).name
