"""Device credentials and request signatures, shared by devices and the ingestion edge (pure).

A device holds (collection, device id, key). The key is never stored by the server: it is derived from the edge's
master key, `device_key(master, collection, device)` = HMAC-SHA256(master, "ldp-device-key" NUL collection NUL
device), so the edge verifies a signature without a lookup, and keeps in Redis only whether each device id is
enrolled or revoked (a revoked id stays revoked: enrolment issues new ids). A request carries

    Authorization: LDP-HMAC-SHA256 device=<id>,ts=<ms since the epoch>,sig=<hex>

with sig = HMAC-SHA256(key, METHOD LF path LF ts LF hex sha256(body)): it binds the method, the path (hence the
collection), the time and the exact body, so a captured request cannot be altered, and the edge refuses the same
signature twice within the allowed clock skew (replay) and any timestamp outside it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from pathlib import Path

SCHEME = "LDP-HMAC-SHA256"
MAX_SKEW_MS = 5 * 60 * 1000
DEVICE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HEADER = re.compile(rf"^{SCHEME} device=([A-Za-z0-9._-]{{1,64}}),ts=([0-9]{{1,15}}),sig=([0-9a-f]{{64}})$")


class AuthError(ValueError):
    """Credentials that are missing, malformed or do not verify; the message says which (never the secret)."""


@dataclass(frozen=True)
class Signed:
    """The claims of an Authorization header: who, when, and the signature."""

    device: str
    timestamp_ms: int
    signature: str


@dataclass(frozen=True)
class Credential:
    """What a device holds, as `ldp devices enroll` writes it: its collection, id and key (the edge keeps none)."""

    collection: str
    device: str
    key: bytes

    def to_json(self) -> dict[str, str]:
        return {"collection": self.collection, "device": self.device, "key": self.key.hex()}

    @classmethod
    def from_json(cls, entry: dict[str, str]) -> Credential:
        return cls(entry["collection"], entry["device"], bytes.fromhex(entry["key"]))


def load_credentials(path: Path) -> list[Credential]:
    """The credentials in a file written by `ldp devices enroll`."""
    return [Credential.from_json(entry) for entry in json.loads(Path(path).read_text())]


def device_key(master: bytes, collection: str, device: str) -> bytes:
    """The secret key of a device (derived, so the edge stores no per-device secret)."""
    message = b"\0".join([b"ldp-device-key", collection.encode(), device.encode()])
    return hmac.new(master, message, hashlib.sha256).digest()


def signature(key: bytes, method: str, path: str, timestamp_ms: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of method, path, time and body digest under the device's key."""
    text = f"{method.upper()}\n{path}\n{timestamp_ms}\n{hashlib.sha256(body).hexdigest()}".encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def authorization(device: str, key: bytes, method: str, path: str, body: bytes, timestamp_ms: int) -> str:
    """The Authorization header value of a request.

    Examples
    --------
    >>> authorization("d1", b"k" * 32, "POST", "/v1/collections/c/reports", b"", 1)[:40]
    'LDP-HMAC-SHA256 device=d1,ts=1,sig=e060b'
    """
    return f"{SCHEME} device={device},ts={timestamp_ms},sig={signature(key, method, path, timestamp_ms, body)}"


def parse_authorization(header: str | None) -> Signed:
    """The claims of an Authorization header; AuthError if it is missing or not of our scheme."""
    if not header:
        raise AuthError("no credentials (Authorization header)")
    match = _HEADER.match(header.strip())
    if match is None:
        raise AuthError(f"malformed Authorization header (expected {SCHEME} device=ID,ts=MS,sig=HEX)")
    return Signed(match.group(1), int(match.group(2)), match.group(3))


def verify(key: bytes, signed: Signed, method: str, path: str, body: bytes, now_ms: int) -> None:
    """AuthError unless the signature is the key's over this request and its time within MAX_SKEW_MS of now."""
    if abs(signed.timestamp_ms - now_ms) > MAX_SKEW_MS:
        raise AuthError("request time outside the allowed clock skew")
    expected = signature(key, method, path, signed.timestamp_ms, body)
    if not hmac.compare_digest(expected, signed.signature):
        raise AuthError("signature does not verify")
