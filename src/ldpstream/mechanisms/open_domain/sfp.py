"""Apple's Sequence Fragment Puzzle (SFP): heavy hitters from fragments of strings tied by a puzzle piece.

Apple's Differential Privacy Team, "Learning with Privacy at Scale", 2017. A device with string d, padded to
L = max_length bytes, draws one of the P = ceil(L / s) fragment positions l in {0, s, 2s, ...} uniformly (s = `step`,
2 in the paper) and sends two sketch reports:

- the fragment record (r(d), d[l : l + s]) through position l's sketch, r(d) = h_r(d) in [0, 256) a public 8-bit
  "puzzle piece" hash of the whole string;
- the whole string through the word sketch.

Both sketches are hashed GRR (`HashedGRR`, PEM's oracle) at eps / 2 each. The report is eps-LDP by sequential
composition: the position is independent of d, and given it each record is randomized response on one hashed value
(ratio <= e^(eps/2)), so Pr[report | d] / Pr[report | d'] <= e^(eps/2) e^(eps/2) = e^eps (tested by enumerating every
report of small sketches). Hashed GRR rather than HCMS because its rare-string n Var, ~4 e^x / (e^x - 1)^2 at
x = eps / 2, is never above HCMS's ((e^x + 1) / (e^x - 1))^2 (4 e^x <= (e^x + 1)^2;
`ldpstream.mechanisms.open_domain.tree`).

Statistics: the P position sketches then the word sketch, side by side (each ends with its own n), so they add. Decoding
(on read, `heavy_hitters`): at each position every record (piece, fragment) is scored by its sketch and the `beam` best
kept (256 x top: a heavy string's record competes with PIECES x fragments records of noise at n / P devices); for each
piece value r, the candidates are the cartesian product of its kept fragments across the positions, only those whose own
piece h_r is r (the puzzle: a string made of another string's fragments rarely hashes to the same piece); the beam is
halved until at most MAX_ASSEMBLED strings are assembled (and MAX_PIECE_ROWS per piece). Every candidate is estimated by
the word sketch (jointly with its leaders and peeled, as in the trees), the `top` best are the heavy hitters. A string's
estimate is the word sketch's: unbiased over the hashes' draw, with the exact conditional expectation m/(m-1) (gamma -
1/m) per device given them (`ldpstream.mechanisms.open_domain.sketch`), n Var at eps / 2 over all n devices: (m/(m-1))^2
(f V(1) + (1 - f) E[V(gamma)]). The fragments only choose candidates.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Estimate, LDPError, Mechanism, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import check_frequency_epsilon, check_report_batch
from ldpstream.mechanisms.open_domain.sketch import HashedGRR
from ldpstream.mechanisms.open_domain.strings import StringDomain, buckets, hash_salts, prefix_fingerprints
from ldpstream.mechanisms.open_domain.tree import HeavyHitters, peeled_estimates, suffixes

PIECES = 256  # puzzle-piece values: an 8-bit hash (Apple 2017)
MAX_RECORDS = 1 << 20  # records (piece, fragment) scored per position: PIECES (symbols + 1)^step
MAX_ASSEMBLED = 1 << 25  # strings assembled from fragments and hashed (about 1/256 of them kept and scored)
MAX_PIECE_ROWS = 1 << 18  # strings assembled for one piece at once (memory: P int64 indices each)
DEFAULT_STEP = 2  # bytes per fragment (Apple 2017)
BEAM_PER_TOP = 256  # records kept per position per heavy hitter asked for (halved to fit the caps above)


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise LDPError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class SFP(Mechanism):
    """Sequence Fragment Puzzle over hashed-GRR sketches at eps / 2 each (module docstring).

    Reports: "position" (uint8), "fragment_hash", "fragment_y" (the position sketch's), "word_hash", "word_y".

    Examples
    --------
    >>> sfp = SFP(6.0, StringDomain(4, "abc"), seed=7, top=2)
    >>> sfp.positions, sfp.word.width  # P = 4 / 2 fragments of 2 bytes; g = round(e^3) + 1
    ((0, 2), 21)
    >>> population = ["abca"] * 60000 + ["cab"] * 30000 + ["b"] * 10000
    >>> found = sfp.heavy_hitters(sfp.accumulate(sfp.perturb(population, np.random.default_rng(0))))
    >>> list(found.items), [round(float(v), 1) for v in found.value]
    (['abca', 'cab'], [0.6, 0.3])
    """

    name: ClassVar[str] = "sfp"
    auto_rank: ClassVar[int] = 30

    def __init__(self, epsilon: float, domain: StringDomain, seed: int = 0, step: int | None = None,
                 top: int = 20, beam: int | None = None, hashes: int | None = None) -> None:
        self.epsilon = check_frequency_epsilon(epsilon)
        self.domain = domain
        extensions = domain.symbols.shape[0] + 1
        fitting = max(1, int(math.floor(math.log(MAX_RECORDS / PIECES) / math.log(extensions) + 1e-9)))
        self.step = min(DEFAULT_STEP, fitting, domain.max_length) if step is None else _check_positive("step", step)
        if self.step > domain.max_length or PIECES * extensions**self.step > MAX_RECORDS:
            raise LDPError(f"step {self.step} is above max_length or gives more than {MAX_RECORDS} records")
        self.top = _check_positive("top", top)
        self.beam = BEAM_PER_TOP * self.top if beam is None else _check_positive("beam", beam)
        self.seed = int(seed)
        self.positions = tuple(range(0, domain.max_length, self.step))
        half = self.epsilon / 2  # sequential composition: eps / 2 per record
        # a record row: the piece byte, then the fragment (zeros past the string's end); hashed over all its bytes
        self.record_domain = StringDomain(self.step + 1)
        self.fragments = tuple(
            HashedGRR(half, self.record_domain, hashes=hashes, seed=self._seed(t)) for t in range(len(self.positions))
        )
        self.word = HashedGRR(half, domain, hashes=hashes, seed=self._seed(len(self.positions)))
        self._piece_seed = self._seed(len(self.positions) + 1)
        self._piece_salt = hash_salts(self._piece_seed, 1)
        self._offsets = np.cumsum([0] + [o.stats_size for o in (*self.fragments, self.word)])

    def _seed(self, index: int) -> int:
        return (self.seed * 1_000_003 + 7919 * (index + 1)) % (1 << 64)

    # --- reports and statistics -----------------------------------------------------------------------------------
    @property
    def schema(self) -> ReportSchema:
        fragment = (dataclasses.replace(c, name=f"fragment_{c.name}") for c in self.fragments[0].schema.columns)
        word = (dataclasses.replace(c, name=f"word_{c.name}") for c in self.word.schema.columns)
        return ReportSchema((Column("position", "uint8", 0, len(self.positions) - 1), *fragment, *word))

    @property
    def stats_size(self) -> int:
        return int(self._offsets[-1])

    def pieces(self, rows: np.ndarray) -> np.ndarray:
        """r(d) in [0, 256): the public puzzle-piece hash of each whole padded row."""
        prints = prefix_fingerprints(rows, self.domain.max_length, self._piece_seed)
        return buckets(prints, self._piece_salt, PIECES)

    def records(self, rows: np.ndarray, position: np.ndarray) -> np.ndarray:
        """(n, step + 1) uint8: each row's piece, then its fragment at fragment index `position`."""
        n = rows.shape[0]
        padded = np.zeros((n, len(self.positions) * self.step), dtype=np.uint8)
        padded[:, : self.domain.max_length] = rows
        fragment = padded.reshape(n, len(self.positions), self.step)[np.arange(n), position]
        return np.concatenate([self.pieces(rows).astype(np.uint8)[:, None], fragment], axis=1)

    def perturb(self, values: Sequence[str] | np.ndarray, rng: np.random.Generator) -> Reports:
        rows = self.domain.encode(values)
        n: int = rows.shape[0]
        position = rng.integers(0, len(self.positions), size=n).astype(np.uint8)
        records = self.records(rows, position)
        reports = {c.name: np.empty((n, *c.row_shape()), dtype=c.dtype) for c in self.schema.columns}
        reports["position"][:] = position
        for t, oracle in enumerate(self.fragments):  # loop over positions, vectorised over their devices
            mine = np.flatnonzero(position == t)
            for name, column in oracle.perturb_rows(records[mine], rng).items():
                reports[f"fragment_{name}"][mine] = column
        for name, column in self.word.perturb_rows(rows, rng).items():
            reports[f"word_{name}"][:] = column
        return reports

    def _word_part(self, reports: Reports) -> Reports:
        return {name[len("word_"):]: np.asarray(col) for name, col in reports.items() if name.startswith("word_")}

    def _fragment_parts(self, reports: Reports) -> list[tuple[np.ndarray, Reports]]:
        position = np.asarray(reports["position"])
        parts = []
        for t in range(len(self.positions)):
            mine = np.flatnonzero(position == t)
            parts.append((mine, {name[len("fragment_"):]: np.asarray(col)[mine] for name, col in reports.items()
                                 if name.startswith("fragment_")}))
        return parts

    def accumulate(self, reports: Reports) -> np.ndarray:
        check_report_batch(self.schema, reports)
        parts = [o.accumulate(part) for o, (_, part) in zip(self.fragments, self._fragment_parts(reports), strict=True)]
        return np.concatenate([*parts, self.word.accumulate(self._word_part(reports))])

    def _part(self, stats: np.ndarray, index: int) -> np.ndarray:
        return stats[self._offsets[index] : self._offsets[index + 1]]

    def _check_stats(self, stats: np.ndarray) -> tuple[np.ndarray, int]:
        """The statistics as float64, and n; LDPError if their shape or counts are not those of real reports."""
        try:
            s = np.asarray(stats, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise LDPError(f"statistics must be numbers: {exc}") from exc
        if s.shape != (self.stats_size,):
            raise LDPError(f"statistics must have shape ({self.stats_size},), got {s.shape}")
        _, n = self.word.z_table(self._part(s, len(self.fragments)))
        spread = sum(oracle.z_table(self._part(s, t))[1] for t, oracle in enumerate(self.fragments))
        if spread != n:
            raise LDPError(f"statistics: {spread} fragment reports but {n} word reports")
        return s, n

    # --- estimates ------------------------------------------------------------------------------------------------
    def frequencies(self, stats: np.ndarray, values: Sequence[str] | np.ndarray) -> Estimate:
        """Unbiased frequencies of given strings from the word sketch (eps / 2, all n devices)."""
        s, _ = self._check_stats(stats)
        return self.word.frequencies(self._part(s, len(self.fragments)), self.domain.encode(values))

    def user_terms(self, reports: Reports, rows: np.ndarray) -> np.ndarray:
        """(n, C): each report's unbiased term for each candidate row; their mean is `frequencies`."""
        check_report_batch(self.schema, reports)
        return self.word.user_terms(self._word_part(reports), rows)

    def position_records(self, position: int) -> np.ndarray:
        """(PIECES F, step + 1) every record a device may hold at fragment index `position` (a string's first byte
        is not 0; the last fragment is zero past max_length)."""
        width = min(self.step, self.domain.max_length - self.positions[position])
        tails = suffixes(self.domain, width)
        if position == 0:
            tails = tails[tails[:, 0] != 0]
        fragments = np.zeros((tails.shape[0], self.step), dtype=np.uint8)
        fragments[:, :width] = tails
        piece = np.repeat(np.arange(PIECES, dtype=np.uint8), fragments.shape[0])
        return np.concatenate([piece[:, None], np.tile(fragments, (PIECES, 1))], axis=1)

    def _kept_records(self, stats: np.ndarray) -> list[np.ndarray]:
        """Per position, the records of the `beam` largest estimates, best first."""
        kept = []
        for t, oracle in enumerate(self.fragments):
            table, n = oracle.z_table(self._part(stats, t))
            records = self.position_records(t)
            if n == 0:
                kept.append(records[:0])
                continue
            value = oracle.score(table, n, oracle.candidate_cells(records))
            kept.append(records[np.argsort(-value, kind="stable")[: self.beam]])
        return kept

    def _candidates(self, kept: list[np.ndarray]) -> np.ndarray:
        """Valid rows assembled, per piece, from the first `beam'` kept records of every position (beam' halved
        until the product fits MAX_ASSEMBLED and MAX_PIECE_ROWS), whose own piece is that piece."""
        beam = self.beam
        while True:
            counts = np.stack([np.bincount(k[:beam, 0], minlength=PIECES) for k in kept])  # (P, PIECES)
            product = counts.prod(axis=0, dtype=np.float64)
            if (product.sum() <= MAX_ASSEMBLED and product.max() <= MAX_PIECE_ROWS) or beam == 1:
                break
            beam //= 2
        found = [np.zeros((0, self.domain.max_length), dtype=np.uint8)]
        for piece in np.flatnonzero(counts.min(axis=0) > 0):  # loop over pieces, each product vectorised
            frags = [k[:beam][k[:beam, 0] == piece, 1:] for k in kept]
            grid = np.meshgrid(*(np.arange(f.shape[0]) for f in frags), indexing="ij")
            rows = np.concatenate([f[g.ravel()] for f, g in zip(frags, grid, strict=True)], axis=1)
            rows = rows[:, : self.domain.max_length]
            ended = rows == 0
            valid = (rows[:, 0] != 0) & ~(np.maximum.accumulate(ended, axis=1) & ~ended).any(axis=1)
            rows = rows[valid]
            found.append(rows[self.pieces(rows) == piece])
        return np.concatenate(found)

    def heavy_hitters(self, stats: np.ndarray, top: int | None = None) -> HeavyHitters:
        """The `top` strings with the largest word-sketch estimates among the candidates the fragments assemble."""
        top = self.top if top is None else _check_positive("top", top)
        s, n = self._check_stats(stats)
        if n == 0:
            return HeavyHitters(n=0, value=np.zeros(0), stderr=np.zeros(0))
        cand = self._candidates(self._kept_records(s))
        if cand.shape[0] == 0:
            return HeavyHitters(n=n, value=np.zeros(0), stderr=np.zeros(0))
        table, _ = self.word.z_table(self._part(s, len(self.fragments)))
        value, stderr = peeled_estimates(self.word, table, n, cand, top)
        order = np.argsort(-value, kind="stable")[:top]
        return HeavyHitters(n=n, value=value[order], stderr=stderr[order], items=tuple(self.domain.decode(cand[order])))

    def estimate(self, stats: np.ndarray) -> HeavyHitters:
        """The current top `top` heavy hitters (`heavy_hitters`)."""
        return self.heavy_hitters(stats)

    def log_pmf(self, reports: Reports, values: Sequence[str] | np.ndarray) -> np.ndarray:
        """(n, C): log Pr[report | true string] = -log P + the position sketch's log-probability of the string's
        record there + the word sketch's of the string."""
        check_report_batch(self.schema, reports)
        rows = self.domain.encode(values)
        out = self.word.log_pmf_rows(self._word_part(reports), rows) - math.log(len(self.positions))
        for t, (mine, part) in enumerate(self._fragment_parts(reports)):
            records = self.records(rows, np.full(rows.shape[0], t))
            out[mine] += self.fragments[t].log_pmf_rows(part, records)
        return out

    def worst_case_variance(self) -> float:
        """n Var of a rare string's estimate (the word sketch's, over all n devices)."""
        return float(self.word.variance(0.0))

    def __repr__(self) -> str:
        return f"SFP(epsilon={self.epsilon:g}, positions={self.positions}, beam={self.beam})"
