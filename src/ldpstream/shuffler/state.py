"""What the shuffler keeps between windows, pure: the rows it holds by window, and the record of what it released.

Exactly once, without copying held rows anywhere. Each release is a Kafka transaction that writes the shuffled
batch, this collection's `ShufflerState` and the consumer offsets. The offset committed for a raw partition is
that of the earliest message still holding a row not released (`Pending.committed`), so after a crash the shuffler
reads again every message that may hold such a row. Which of a re-read message's rows were released already
follows from the state: a release at window C took every row of a window <= C from the messages read before it,
those at offsets below the read positions it records (`Release.positions`); `released` marks them, and the rest
are held again, exactly as before the crash. Rows that arrive after their window was closed (the edge's spool
drained late, a window too small to release) are held like the others and go out with the next release.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from ldpstream.contract.shuffled import WindowFigures
from ldpstream.contract.wire import Concatenation
from ldpstream.shuffler.batch import MEMORY_ROWS, WindowRows, rows_of

FIGURES_KEPT = 200  # recent releases whose figures the state carries (to publish them again after a restart)


class Release(msgspec.Struct, frozen=True, array_like=True):
    """One release: a spec version's rows of windows <= `window_ms`, from the messages below `positions`."""

    spec_version: int
    window_ms: int
    positions: dict[int, int]  # raw partition -> the next offset to read when the batch was taken


class ShufflerState(msgspec.Struct):
    """A collection's releases since the committed offsets, the last window closed per spec version, and the
    figures of its recent releases."""

    releases: list[Release] = msgspec.field(default_factory=list)
    closed: dict[int, int] = msgspec.field(default_factory=dict)  # spec version -> last window start closed
    figures: list[WindowFigures] = msgspec.field(default_factory=list)

    def released(self, spec_version: int, windows: np.ndarray, partition: int, offset: int) -> np.ndarray:
        """Per row of a message at (partition, offset), with its rows' windows: whether a release took it."""
        done = np.zeros(len(windows), dtype=bool)
        for r in self.releases:
            if r.spec_version == spec_version and offset < r.positions.get(partition, 0):
                done |= windows <= r.window_ms
        return done

    def trimmed(self, committed: Mapping[int, int]) -> ShufflerState:
        """Without the releases no message at or after the `committed` offsets was read before (they can mark
        nothing any more), and with the most recent figures only."""
        live = [r for r in self.releases
                if any(offset > committed.get(p, 0) for p, offset in r.positions.items())]
        return ShufflerState(live, dict(self.closed), self.figures[-FIGURES_KEPT:])


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(ShufflerState)


def encode_state(state: ShufflerState) -> bytes:
    return _encoder.encode(state)


def decode_state(data: bytes) -> ShufflerState:
    """The state as written by `encode_state`; ValueError for other bytes."""
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not a shuffler state: {exc}") from None


def threshold(min_batch: int) -> int:
    """A window's release threshold: min_batch plus a uniform draw on [0, min_batch / 10] from the operating system's
    generator, fresh at each close. Never below min_batch (the crowd the accountant is told of is at least that);
    randomized so that whether a window is released does not hinge on one report at a count known in advance."""
    return min_batch + secrets.randbelow(min_batch // 10 + 1)


@dataclass
class Pending:
    """The rows of one collection held, by (spec version, window start), and for each such window the earliest
    offset, per raw partition, of a message that holds some of its rows."""

    memory_rows: int = MEMORY_ROWS
    spill_dir: Path | None = None
    windows: dict[tuple[int, int], WindowRows] = field(default_factory=dict)
    firsts: dict[tuple[int, int], dict[int, int]] = field(default_factory=dict)

    def add(self, state: ShufflerState, spec_version: int, joined: Concatenation, partitions: np.ndarray,
            offsets: np.ndarray) -> int:
        """Hold the rows of one spec version's messages (`joined`; `partitions` and `offsets` per envelope given to
        `concatenate`) that no release took; the number held."""
        rows = rows_of(joined)
        message = np.repeat(joined.messages, joined.sizes)
        windows = joined.timestamps_ms
        keep = np.ones(rows.n, dtype=bool)
        if state.releases:
            for m in joined.messages.tolist():
                mine = message == m
                keep[mine] = ~state.released(spec_version, windows[mine], int(partitions[m]), int(offsets[m]))
        for window in np.unique(windows[keep]).tolist():
            chosen = keep & (windows == window)
            key = (spec_version, window)
            if key not in self.windows:
                self.windows[key] = WindowRows(self.memory_rows, self.spill_dir)
            self.windows[key].add(rows.select(chosen))
            firsts = self.firsts.setdefault(key, {})
            holders = np.unique(message[chosen])
            for p, o in zip(partitions[holders].tolist(), offsets[holders].tolist(), strict=True):
                firsts[p] = min(firsts.get(p, o), o)
        return int(keep.sum())

    def held(self, spec_version: int, through_ms: int) -> list[int]:
        """The windows <= `through_ms` of a spec version with rows held, in order."""
        return sorted(w for v, w in self.windows if v == spec_version and w <= through_ms)

    @property
    def total(self) -> int:
        """The rows held, every window's."""
        return sum(rows.n for rows in self.windows.values())

    def count(self, spec_version: int, window_ms: int) -> int:
        rows = self.windows.get((spec_version, window_ms))
        return 0 if rows is None else rows.n

    def take(self, spec_version: int, windows: list[int]) -> WindowRows:
        """The rows of these windows together, no longer held."""
        out = WindowRows(self.memory_rows, self.spill_dir)
        for w in windows:
            out.absorb(self.windows.pop((spec_version, w)))
            self.firsts.pop((spec_version, w), None)
        return out

    def committed(self, read_next: Mapping[int, int]) -> dict[int, int]:
        """Per raw partition, the offset to resume from: the earliest message holding a row not released, else the
        next to read (`read_next`)."""
        out = dict(read_next)
        for firsts in self.firsts.values():
            for p, o in firsts.items():
                out[p] = min(out.get(p, o), o)
        return out

    def discard(self) -> None:
        for rows in self.windows.values():
            rows.discard()
        self.windows.clear()
        self.firsts.clear()


def releases(pending: Pending, spec_version: int, through_ms: int, draw: int) -> Iterator[tuple[int, list[int]]]:
    """The releases of a close at `through_ms`: the windows held up to it, in order, gathered until they hold at
    least `draw` rows (`threshold`); each group is released at its last window. What is left at the end (too few
    rows) stays held for the next close."""
    group: list[int] = []
    n = 0
    for w in pending.held(spec_version, through_ms):
        group.append(w)
        n += pending.count(spec_version, w)
        if n >= draw:
            yield w, group
            group, n = [], 0

