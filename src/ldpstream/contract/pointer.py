"""The signed pointer to a collection's current spec version, as the edge serves it and devices check it.

A pointer is canonical JSON (sorted keys, no spaces), at most `MAX_POINTER_BYTES`:

    {"collection": NAME, "content_hash": SHA256_HEX, "expires_ms": MS, "issued_ms": MS, "sequence": N,
     "version": V}

`content_hash` is the sha256 of the spec version's exact bytes (what `GET /v1/collections/NAME/specs/V` serves),
so the pointer names one immutable document. The edge signs pointers with its online pointer key
(`ldpstream.contract.signatures.pointer_message`), which can sign nothing a device would take for a spec. Every edge
process issues the same pointer in the same period: `issued_ms` is the start of the period (`POINTER_PERIOD_MS`),
`sequence` its number, `expires_ms` = issued + the validity; Ed25519 is deterministic, so the bytes and signature
are the same whichever process answers, and a device never sees the sequence go back between two of them.

A device keeps the newest (version, sequence) it accepted and refuses a pointer below it (rollback), and refuses an
expired pointer (a frozen edge cannot keep a device on an old version past the expiry: the device keeps its last
good spec and stops reporting until a fresh pointer comes).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from ldpstream.contract.spec import NAME

MAX_POINTER_BYTES = 1024
POINTER_PERIOD_MS = 3_600_000  # a pointer is issued anew every hour...
POINTER_VALIDITY_MS = 24 * 3_600_000  # ...and valid for a day: a device that cannot refresh it stops after a day
MAX_POINTER_VALIDITY_MS = 7 * 24 * 3_600_000  # the longest validity a device accepts (the protocol's bound)
FIELDS = ("collection", "content_hash", "expires_ms", "issued_ms", "sequence", "version")
_HASH = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(NAME)


class PointerError(ValueError):
    """Bytes that are not a well-formed pointer (the message says what is wrong)."""


@dataclass(frozen=True)
class Pointer:
    """Where a collection's current spec version is, how long this says so, and its place in the sequence."""

    collection: str
    version: int
    content_hash: str
    issued_ms: int
    expires_ms: int
    sequence: int

    def to_bytes(self) -> bytes:
        """The canonical JSON the edge signs and serves."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    def expired(self, now_ms: int) -> bool:
        """True once the pointer no longer vouches for its version."""
        return now_ms >= self.expires_ms

    def newer_than(self, version: int, sequence: int) -> bool:
        """True if this pointer is (version, sequence) or later: what a device that saw that may accept."""
        return (self.version, self.sequence) >= (version, sequence)


def issue(collection: str, version: int, content_hash: str, now_ms: int,
          period_ms: int = POINTER_PERIOD_MS, validity_ms: int = POINTER_VALIDITY_MS) -> Pointer:
    """The pointer every edge process issues at `now_ms` for this version (the same within a period).

    Examples
    --------
    >>> p = issue("app", 2, "0" * 64, now_ms=7_300_000)
    >>> p.issued_ms, p.sequence, p.expires_ms - p.issued_ms
    (7200000, 2, 86400000)
    >>> parse_pointer(p.to_bytes()) == p
    True
    """
    sequence = now_ms // period_ms
    return Pointer(collection, version, content_hash, sequence * period_ms, sequence * period_ms + validity_ms,
                   sequence)


def parse_pointer(data: bytes) -> Pointer:
    """The pointer in `data` (bytes whose signature was verified first); PointerError whatever else they are."""
    if len(data) > MAX_POINTER_BYTES:
        raise PointerError(f"a pointer is at most {MAX_POINTER_BYTES} bytes, got {len(data)}")
    try:
        value: Any = json.loads(data)
    except (ValueError, RecursionError):
        raise PointerError("a pointer is JSON") from None
    if not isinstance(value, dict) or sorted(value) != sorted(FIELDS):
        raise PointerError(f"a pointer is an object with exactly the fields {', '.join(FIELDS)}")
    name, content_hash = value["collection"], value["content_hash"]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PointerError("the pointer's collection is not a collection name")
    if not isinstance(content_hash, str) or not _HASH.fullmatch(content_hash):
        raise PointerError("the pointer's content_hash is not 64 lowercase hex digits")
    numbers = {f: value[f] for f in ("expires_ms", "issued_ms", "sequence", "version")}
    for field, number in numbers.items():
        if type(number) is not int or number < 0 or number >= 2**53:  # a boolean is not a number
            raise PointerError(f"the pointer's {field} is not a whole number in [0, 2^53)")
    if numbers["version"] < 1 or numbers["expires_ms"] <= numbers["issued_ms"]:
        raise PointerError("the pointer's version is below 1 or it expires before it is issued")
    return Pointer(name, numbers["version"], content_hash, numbers["issued_ms"], numbers["expires_ms"],
                   numbers["sequence"])
