"""The edge's bounded on-disk spool: Kafka messages the broker could not take, fsynced before they are acknowledged.

A spool is a directory of segment files (`<n>.seg`, n increasing); a record is `<u4 length><u4 crc32>` followed
by the msgpack of [topic, partition, value]. `append` writes records to the newest segment and fsyncs it (and the
directory when it made the segment) before it returns: only then may the edge acknowledge their reports. A torn
record at a segment's end (the process died while writing it, so it was never acknowledged) is ignored when read.
The drainer reads the oldest segment, produces its records and removes it once Kafka acknowledged them all;
`rotate` closes the segment being written so that it can be drained too. The spool refuses (`SpoolFull`) a write
that would take it beyond `limit_bytes`.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path
from typing import BinaryIO

import msgspec

HEADER = struct.Struct("<II")
Record = tuple[str, int, bytes]  # topic, partition, value


class SpoolFull(RuntimeError):
    """The spool has no room for the records."""


class Spool:
    """Segments of fsynced records in a directory, oldest first (see the module docstring)."""

    def __init__(self, directory: Path, limit_bytes: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._segments = sorted(self.directory.glob("*.seg"), key=lambda p: int(p.stem))
        self.size = sum(p.stat().st_size for p in self._segments)
        self._next = int(self._segments[-1].stem) + 1 if self._segments else 0
        self._file: BinaryIO | None = None  # the open newest segment, if appending to it

    @property
    def empty(self) -> bool:
        return self.size == 0

    @property
    def full(self) -> bool:
        return self.size >= self.limit_bytes

    def append(self, records: list[Record]) -> None:
        """Write and fsync records (SpoolFull, nothing written, if they do not fit)."""
        data = b"".join(_frame(msgspec.msgpack.encode(list(r))) for r in records)
        with self._lock:
            if self.size + len(data) > self.limit_bytes:
                raise SpoolFull(f"spool holds {self.size} of {self.limit_bytes} bytes; {len(data)} more do not fit")
            if self._file is None:
                path = self.directory / f"{self._next:012d}.seg"
                self._next += 1
                self._file = open(path, "ab")  # noqa: SIM115 - kept open between appends
                self._segments.append(path)
                _fsync_dir(self.directory)
            self._file.write(data)
            self._file.flush()
            os.fsync(self._file.fileno())
            self.size += len(data)

    def rotate(self) -> None:
        """Close the segment being written: the next append starts a new one."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def closed_segments(self) -> list[Path]:
        """The segments no longer written to, oldest first."""
        with self._lock:
            return self._segments[:-1] if self._file is not None else list(self._segments)

    def remove(self, segment: Path) -> None:
        """Drop a drained segment."""
        with self._lock:
            self.size -= segment.stat().st_size
            segment.unlink()
            self._segments.remove(segment)
            _fsync_dir(self.directory)


def read_segment(segment: Path) -> list[Record]:
    """The whole records of a segment, in order (a torn or corrupt tail is left out)."""
    data = segment.read_bytes()
    records: list[Record] = []
    at = 0
    while at + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, at)
        payload = data[at + HEADER.size:at + HEADER.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        topic, partition, value = msgspec.msgpack.decode(payload)
        records.append((topic, partition, value))
        at += HEADER.size + length
    return records


def _frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
