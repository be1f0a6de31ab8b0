"""Strings as fixed-width byte rows, and public seeded hashes of their prefixes (vectorised over devices).

A `StringDomain` is the set of strings of at most `max_length` bytes, over an ASCII `alphabet` or any non-zero
byte. A string is encoded as one row of `max_length` uint8 padded with zeros: byte 0 is the terminator, so the
length-l prefix of a padded row names the string's first l bytes and whether it ended before l. Every hash here is
a public function of (collection seed, level, hash index, prefix bytes), identical on devices and servers.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.hashing import mix64

MAX_STRING_BYTES = 64  # the longest string a `StringDomain` takes; its rows are a few cache lines
_WORD = 8
_MASK = (1 << 64) - 1  # seeds are taken modulo 2^64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment, spreads consecutive seeds apart


@dataclass(frozen=True)
class StringDomain:
    """Strings of 1..max_length bytes: over `alphabet` (ASCII, printable, no NUL), or any byte 1..255 if None.

    Examples
    --------
    >>> domain = StringDomain(4, "abc")
    >>> domain.encode(["ab", "c"]).tolist()
    [[97, 98, 0, 0], [99, 0, 0, 0]]
    >>> domain.decode(np.array([[97, 98, 0, 0]], dtype=np.uint8))
    ['ab']
    """

    max_length: int
    alphabet: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, (int, np.integer)):
            raise LDPError(f"max_length must be an integer, got {self.max_length!r}")
        if not 1 <= self.max_length <= MAX_STRING_BYTES:
            raise LDPError(f"max_length must be in [1, {MAX_STRING_BYTES}], got {self.max_length}")
        if self.alphabet is not None:
            if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
                raise LDPError("an alphabet is a non-empty string of distinct characters")
            if not set(self.alphabet) <= set(string.printable) - {"\x0b", "\x0c"}:
                raise LDPError("an alphabet holds printable ASCII characters only")

    @cached_property
    def symbols(self) -> np.ndarray:
        """The bytes a string may hold (uint8, sorted), without the terminator 0."""
        if self.alphabet is None:
            return np.arange(1, 256, dtype=np.uint8)
        return np.sort(np.frombuffer(self.alphabet.encode("ascii"), dtype=np.uint8))

    @cached_property
    def _allowed(self) -> np.ndarray:
        table = np.zeros(256, dtype=bool)
        table[self.symbols] = True
        table[0] = True  # padding
        return table

    def encode(self, values: Sequence[str] | Sequence[bytes] | np.ndarray) -> np.ndarray:
        """(n, max_length) uint8 rows of the strings (UTF-8); LDPError for an empty, over-long or foreign string.

        A uint8 matrix of that width is validated and returned as is (the form the decoder and simulator pass).
        """
        # a Python sequence goes through objects: numpy's fixed-width strings would drop trailing NULs unseen
        arr = np.asarray(values) if isinstance(values, np.ndarray) else np.array(values, dtype=object)
        if arr.dtype == object and arr.ndim == 2 and arr.shape[0] and isinstance(arr.flat[0], (int, np.integer)):
            arr = arr.astype(np.int64)
        if arr.dtype == np.uint8 and arr.ndim == 2:
            if arr.shape[1] != self.max_length:
                raise LDPError(f"string rows must be {self.max_length} bytes wide, got {arr.shape[1]}")
            rows = arr
        else:
            arr = np.atleast_1d(arr)
            if arr.ndim != 1:
                raise LDPError(f"a string attribute takes a vector of strings, got shape {arr.shape}")
            if arr.dtype.kind == "U":
                arr = np.char.encode(arr, "utf-8")
            elif arr.dtype.kind == "O":
                if not all(isinstance(v, (str, bytes)) for v in arr):
                    raise LDPError("values must be strings")
                encoded = [v.encode("utf-8") if isinstance(v, str) else v for v in arr]
                if any(b"\0" in v for v in encoded):
                    raise LDPError("string holds a NUL byte")
                arr = np.array(encoded, dtype=bytes)
            elif arr.dtype.kind != "S":
                raise LDPError(f"values must be strings, got dtype {arr.dtype}")
            if arr.size == 0:
                return np.zeros((0, self.max_length), dtype=np.uint8)
            if arr.dtype.itemsize > self.max_length:
                lengths = np.char.str_len(arr)
                if lengths.max() > self.max_length:
                    raise LDPError(
                        f"string of {int(lengths.max())} bytes is longer than the maximum {self.max_length}"
                    )
            rows = np.ascontiguousarray(arr.astype(f"S{self.max_length}")).view(np.uint8)
            rows = rows.reshape(arr.shape[0], self.max_length)
        self._check_rows(rows)
        return rows

    def _check_rows(self, rows: np.ndarray) -> None:
        if rows.shape[0] == 0:
            return
        if not self._allowed[rows].all():
            raise LDPError("string holds bytes outside the alphabet" if self.alphabet else "string holds a NUL byte")
        if (rows[:, 0] == 0).any():
            raise LDPError("empty string")
        ends = rows == 0
        # after the first terminator only terminators (a NUL inside a string would alias a shorter one)
        if (np.maximum.accumulate(ends, axis=1) & ~ends).any():
            raise LDPError("string holds a NUL byte")

    def decode(self, rows: np.ndarray) -> list[str]:
        """The strings of padded rows (UTF-8, undecodable bytes replaced)."""
        packed = np.ascontiguousarray(rows, dtype=np.uint8).view(f"S{rows.shape[1]}").ravel()
        return [s.decode("utf-8", errors="replace") for s in packed.tolist()]


def prefix_fingerprints(rows: np.ndarray, length: int, seed: int) -> np.ndarray:
    """A 64-bit seeded fingerprint of each row's first `length` bytes (uint64 (n,), vectorised over rows).

    The bytes are read as little-endian 64-bit words (zero beyond `length`) and folded with SplitMix64's finalizer:
    f = mix64(... mix64(mix64(s ^ w_0) ^ w_1) ...), s = mix64(seed), a loop over the few words, not over rows.
    """
    words = -(-length // _WORD)
    padded = np.zeros((rows.shape[0], words * _WORD), dtype=np.uint8)
    padded[:, :length] = rows[:, :length]
    as_words = padded.view("<u8")
    state = np.full(rows.shape[0], mix64(np.array([seed & _MASK], dtype=np.uint64))[0], dtype=np.uint64)
    for w in range(words):
        state = mix64(state ^ as_words[:, w])
    return state


def hash_salts(seed: int, hashes: int) -> np.ndarray:
    """One public 64-bit salt per hash function j in [0, hashes), derived from the collection seed."""
    base = np.uint64(seed & _MASK)
    with np.errstate(over="ignore"):
        return mix64(base + _GOLDEN * (np.arange(1, hashes + 1, dtype=np.uint64)))


def buckets(fingerprints: np.ndarray, salts: np.ndarray, width: int) -> np.ndarray:
    """h_j(x) in [0, width): mix64(fingerprint ^ salt_j), reduced by Lemire's multiply-shift on its high 32 bits
    (uniform up to width / 2^32); fingerprints and salts broadcast (e.g. (C, 1) against (k,) for all hashes)."""
    high = mix64(np.asarray(fingerprints, dtype=np.uint64) ^ np.asarray(salts, dtype=np.uint64)) >> np.uint64(32)
    return ((high * np.uint64(width)) >> np.uint64(32)).astype(np.int64)
