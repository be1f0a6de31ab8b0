"""A window's reports, shuffled (pure but for spill files: no Kafka).

`Rows` holds reports as columns (every attribute's rows, ascending, and its flat columns), as
`ldpstream.contract.wire.concatenate` gives them; `shuffled` permutes them with the operating system's cryptographic
generator (`uniform_permutation`: a sort on 64 random bits per row, a uniform permutation but for ties, whose
probability is below n^2 / 2^65) and `Rows.envelopes` re-encodes them canonically: fresh envelopes of `per_message`
rows, attributes and columns in order, every device 0 and every time the release window's start, so nothing of a
report's position, its message, its edge or its arrival survives the shuffle.

A window larger than memory (`WindowRows` past `memory_rows`) shuffles in two passes through disk (`DiskBatch`):
each arriving row goes to one of B bucket files drawn uniformly at random (pass one); at release the buckets are read
in a random order, each permuted in memory and emitted (pass two). The result is a uniform permutation: each row's
bucket is uniform and independent, the order within a bucket uniform, and the buckets' order uniform, so every
arrangement of the rows is equally likely. Memory holds one bucket: with B = ceil(2 n / memory_rows) buckets a
bucket's size is Binomial(n, 1/B) with mean at most memory_rows / 2, and by Chernoff's bound
P(size > memory_rows) <= (e/4)^(memory_rows/2); over B buckets, at most B (e/4)^(memory_rows/2) (below 1e-80 for
memory_rows = 1,000).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ldpstream.contract.wire import AttributeColumns, Concatenation, concatenate, decode_envelope, encode_envelope
from ldpstream.contract.wire import envelope_of as wire_envelope

PER_MESSAGE = 1000  # rows per shuffled envelope: well under a Kafka message's 1 MB for every mechanism
MEMORY_ROWS = 5_000_000  # rows of one window held in memory before it spills to disk (`WindowRows`)
MAX_WINDOW_ROWS = 1_000_000_000  # the largest window the spill's bound is stated for (400 bucket files)


def uniform_permutation(n: int) -> np.ndarray:
    """A uniformly random permutation of range(n) from the operating system's cryptographic generator."""
    keys = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) if n else np.zeros(0, dtype=np.uint64)
    return np.argsort(keys, kind="stable")


def uniform_below(k: int, n: int) -> np.ndarray:
    """n draws uniform on range(k) from the operating system's generator (the modulo bias is below k / 2^64)."""
    draws = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) if n else np.zeros(0, dtype=np.uint64)
    return (draws % np.uint64(k)).astype(np.int64)


@dataclass
class Rows:
    """Reports as columns: every attribute's rows (ascending, < n) and its flat columns."""

    n: int = 0
    attributes: dict[int, AttributeColumns] = field(default_factory=dict)

    def select(self, keep: np.ndarray) -> Rows:
        """The rows where `keep` holds, renumbered in order."""
        renumber = np.cumsum(keep) - 1
        out: dict[int, AttributeColumns] = {}
        for a, cols in self.attributes.items():
            take = keep[cols.rows]
            if take.any():
                out[a] = AttributeColumns(renumber[cols.rows[take]],
                                          {k: _rows_of(v, take) for k, v in cols.columns.items()})
        return Rows(int(keep.sum()), out)

    def permuted(self, order: np.ndarray) -> Rows:
        """The rows in the order `order` (row i of the result is row order[i] of these)."""
        position = np.empty(self.n, dtype=np.int64)
        position[order] = np.arange(self.n)
        out: dict[int, AttributeColumns] = {}
        for a, cols in self.attributes.items():
            new_rows = position[cols.rows]
            sort = np.argsort(new_rows, kind="stable")
            out[a] = AttributeColumns(new_rows[sort], {k: _reordered(v, len(cols.rows), sort)
                                                       for k, v in cols.columns.items()})
        return Rows(self.n, out)

    def envelopes(self, collection: str, version: int, start_ms: int, per_message: int = PER_MESSAGE
                  ) -> Iterator[bytes]:
        """The rows in order as canonical envelopes of `per_message` rows: devices 0, every time `start_ms`."""
        bounds = {a: np.searchsorted(cols.rows, np.arange(0, self.n + per_message, per_message))
                  for a, cols in self.attributes.items()}
        for i, lo in enumerate(range(0, self.n, per_message)):
            hi = min(lo + per_message, self.n)
            chunk: dict[int, AttributeColumns] = {}
            for a, cols in self.attributes.items():
                first, last = int(bounds[a][i]), int(bounds[a][i + 1])
                if last > first:
                    per_row = {k: len(v) // len(cols.rows) for k, v in cols.columns.items()}
                    chunk[a] = AttributeColumns(cols.rows[first:last] - lo, {
                        k: v[first * per_row[k]:last * per_row[k]] for k, v in cols.columns.items()})
            yield encode_envelope(wire_envelope(collection, version, np.zeros(hi - lo, dtype=np.uint64),
                                                np.full(hi - lo, start_ms, dtype=np.int64), chunk))


def rows_of(joined: Concatenation) -> Rows:
    """The rows of a concatenation of envelopes (`ldpstream.contract.wire.concatenate`)."""
    return Rows(len(joined.devices), dict(joined.attributes))


def merged(parts: list[Rows]) -> Rows:
    """Rows of `parts` one after the other (one concatenation per column)."""
    if len(parts) == 1:
        return parts[0]
    bases = np.cumsum([0, *[p.n for p in parts]])
    out: dict[int, AttributeColumns] = {}
    for a in sorted({a for p in parts for a in p.attributes}):
        present = [(base, p.attributes[a]) for base, p in zip(bases.tolist(), parts, strict=False) if a in p.attributes]
        names = present[0][1].columns.keys()
        out[a] = AttributeColumns(np.concatenate([c.rows + base for base, c in present]),
                                  {k: np.concatenate([c.columns[k] for _, c in present]) for k in names})
    return Rows(int(bases[-1]), out)


def shuffled(rows: Rows) -> Rows:
    """The rows in a uniformly random order (`uniform_permutation`)."""
    return rows.permuted(uniform_permutation(rows.n))


class DiskBatch:
    """A window's rows spilled to `buckets` files in `directory`, each row to a uniformly random one (module
    docstring); the files are removed as they are read, or by `discard`."""

    def __init__(self, directory: Path, buckets: int) -> None:
        self.directory, self.buckets, self.n = directory, buckets, 0
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, rows: Rows) -> None:
        """Pass one: every row to a uniformly random bucket file (as envelopes appended, length-prefixed)."""
        draw = uniform_below(self.buckets, rows.n)
        for bucket in np.unique(draw).tolist():
            part = rows.select(draw == bucket)
            with open(self.directory / f"{bucket}.bin", "ab") as out:
                for message in part.envelopes("spill", 1, 0, per_message=10 * PER_MESSAGE):
                    out.write(len(message).to_bytes(8, "little") + message)
        self.n += rows.n

    def shuffled(self) -> Iterator[Rows]:
        """Pass two: the buckets in a random order, each permuted in memory."""
        for bucket in uniform_permutation(self.buckets).tolist():
            path = self.directory / f"{bucket}.bin"
            if not path.exists():
                continue
            data = path.read_bytes()
            values, at = [], 0
            while at < len(data):
                size = int.from_bytes(data[at:at + 8], "little")
                values.append(decode_envelope(data[at + 8:at + 8 + size]))
                at += 8 + size
            path.unlink()
            yield shuffled(rows_of(concatenate(values)))

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class WindowRows:
    """The rows of one window gathered so far: in memory, or past `memory_rows` spilled to disk (`DiskBatch` with
    B = ceil(2 max_rows / memory_rows) buckets: the module docstring's bound holds up to `max_rows` rows)."""

    def __init__(self, memory_rows: int = MEMORY_ROWS, spill_dir: Path | None = None,
                 max_rows: int = MAX_WINDOW_ROWS) -> None:
        self.parts: list[Rows] = []
        self.n = 0
        self.memory_rows, self.max_rows = memory_rows, max_rows
        self.spill_dir = spill_dir
        self.disk: DiskBatch | None = None

    def add(self, rows: Rows) -> None:
        if self.disk is None and self.n + rows.n > self.memory_rows:
            buckets = max(2, -(-2 * self.max_rows // self.memory_rows))
            self.disk = DiskBatch(Path(tempfile.mkdtemp(prefix="ldp-shuffle-", dir=self.spill_dir)), buckets)
            for part in self.parts:
                self.disk.add(part)
            self.parts = []
        if self.disk is not None:
            self.disk.add(rows)
        else:
            self.parts.append(rows)
        self.n += rows.n

    def absorb(self, other: WindowRows) -> None:
        """Add the rows of `other` (which is left empty)."""
        if other.disk is not None:
            for rows in other.disk.shuffled():
                self.add(rows)
            other.disk.discard()
        for part in other.parts:
            self.add(part)
        other.parts, other.n, other.disk = [], 0, None

    def shuffled(self) -> Iterator[Rows]:
        """The rows in a uniformly random order, in pieces (one, from memory)."""
        if self.disk is not None:
            yield from self.disk.shuffled()
        elif self.parts:
            yield shuffled(merged(self.parts))

    def discard(self) -> None:
        if self.disk is not None:
            self.disk.discard()


def _rows_of(flat: np.ndarray, take: np.ndarray) -> np.ndarray:
    """The rows `take` of a flat column of len(take) rows of equal width."""
    return flat.reshape(len(take), -1)[take].reshape(-1)


def _reordered(flat: np.ndarray, rows: int, order: np.ndarray) -> np.ndarray:
    """A flat column of `rows` rows of equal width, its rows in `order`."""
    return flat.reshape(rows, -1)[order].reshape(-1)
