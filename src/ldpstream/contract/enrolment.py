"""Enrolment tokens: what an app's backend (or `ldp devices mint-token`) hands its devices so that each can enrol
itself at the edge (`POST /v1/enroll`), without an operator.

A token is `ldpet1.<payload>.<signature>`, both parts unpadded base64url. The payload is canonical JSON:

    {"collections": [NAME, ...], "expires_ms": MS, "id": HEX32, "issued_ms": MS, "uses": N}

signed (Ed25519, `ENROL_DOMAIN`) by a token key whose private half stays with whoever mints tokens; the edge holds
only the public half, so a compromised edge cannot mint tokens. The token is scoped to its collections, expires,
and enrols at most `uses` devices: the edge counts its uses in Redis under its `id` (and never stores which device
ids a token produced). A token is a bearer secret: anyone who holds it can enrol until its uses run out; it is not an
identity, and a device's reports are tied to its credential, never to its token.

Room for later (documented in the README's security section, not built): a platform attestation (App Attest, Play
Integrity, WebAuthn) beside the token, checked before the use is counted; and anonymous tokens (Privacy Pass) that
the edge can count without learning which minted token it is.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpstream.contract.signatures import KeysById, SignatureError, sign_block, verify_block
from ldpstream.contract.spec import NAME

PREFIX = "ldpet1"
ENROL_DOMAIN = b"ldpstream enrolment token signature v1\x00"
MAX_TOKEN_CHARS = 4096
MAX_COLLECTIONS = 64
MAX_USES = 10**9
FIELDS = ("collections", "expires_ms", "id", "issued_ms", "uses")
_ID = re.compile(r"[0-9a-f]{32}")
_NAME = re.compile(f"(job/)?{NAME[1:-1]}")  # a collection, or a training job's key job/JOB
_B64URL = re.compile(r"[A-Za-z0-9_-]+")


class TokenError(ValueError):
    """A token that is malformed, not signed by a trusted token key, expired, or not for this collection."""


@dataclass(frozen=True)
class EnrolmentToken:
    """What a token allows: which collections, until when, how many devices."""

    id: str
    collections: tuple[str, ...]
    uses: int
    issued_ms: int
    expires_ms: int

    def payload(self) -> bytes:
        """The canonical JSON that is signed."""
        return json.dumps({**asdict(self), "collections": sorted(self.collections)}, sort_keys=True,
                          separators=(",", ":")).encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not _B64URL.fullmatch(text):
        raise TokenError("a token's parts are base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("a token's parts are base64url") from None


def new_token(collections: list[str], uses: int, issued_ms: int, expires_ms: int) -> EnrolmentToken:
    """A fresh token (random 128-bit id); ValueError for arguments a token cannot carry."""
    names = tuple(sorted(set(collections)))
    if not 1 <= len(names) <= MAX_COLLECTIONS or not all(_NAME.fullmatch(n) for n in names):
        raise ValueError(f"a token names 1 to {MAX_COLLECTIONS} collections, each a collection name")
    if not 1 <= uses <= MAX_USES:
        raise ValueError(f"a token's uses are 1 to {MAX_USES}, got {uses}")
    if expires_ms <= issued_ms:
        raise ValueError("a token must expire after it is issued")
    return EnrolmentToken(secrets.token_hex(16), names, uses, issued_ms, expires_ms)


def mint(private: Ed25519PrivateKey, token: EnrolmentToken) -> str:
    """The token's text, signed with the token key."""
    payload = token.payload()
    return f"{PREFIX}.{_b64(payload)}.{_b64(sign_block(private, ENROL_DOMAIN + payload))}"


def read_token(text: str, keys: KeysById, collection: str, now_ms: int) -> EnrolmentToken:
    """The token in `text` if it is signed by one of `keys`, unexpired at `now_ms` and names `collection`;
    TokenError (saying which) otherwise, whatever the text."""
    return usable(verified_token(text, keys), collection, now_ms)


def usable(token: EnrolmentToken, collection: str, now_ms: int) -> EnrolmentToken:
    """The verified token if it is unexpired at `now_ms` and names `collection`; TokenError otherwise."""
    if now_ms >= token.expires_ms:
        raise TokenError("the enrolment token has expired")
    if collection not in token.collections:
        raise TokenError(f"the enrolment token is not for collection {collection!r}")
    return token


def verified_token(text: str, keys: KeysById) -> EnrolmentToken:
    """The token in `text` if it is well formed and signed by one of `keys` (whatever the time or collection: what
    a verifier may cache by the exact text); TokenError otherwise, whatever the text."""
    if not isinstance(text, str) or len(text) > MAX_TOKEN_CHARS:
        raise TokenError(f"a token is text of at most {MAX_TOKEN_CHARS} characters")
    parts = text.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise TokenError(f"not an enrolment token (expected {PREFIX}.<payload>.<signature>)")
    payload, block = _unb64(parts[1]), _unb64(parts[2])
    try:
        verify_block(keys, block, ENROL_DOMAIN + payload, "enrolment token")
    except SignatureError as exc:
        raise TokenError(str(exc)) from None
    return _parse(payload)


def _parse(payload: bytes) -> EnrolmentToken:
    try:
        value: Any = json.loads(payload)
    except (ValueError, RecursionError):
        raise TokenError("a token's payload is JSON") from None
    if not isinstance(value, dict) or sorted(value) != sorted(FIELDS):
        raise TokenError(f"a token's payload has exactly the fields {', '.join(FIELDS)}")
    names = value["collections"]
    if (not isinstance(names, list) or not 1 <= len(names) <= MAX_COLLECTIONS
            or not all(isinstance(n, str) and _NAME.fullmatch(n) for n in names)):
        raise TokenError("a token's collections are 1 to 64 collection names")
    if not isinstance(value["id"], str) or not _ID.fullmatch(value["id"]):
        raise TokenError("a token's id is 32 lowercase hex digits")
    numbers = [value[f] for f in ("uses", "issued_ms", "expires_ms")]
    if any(type(n) is not int or not 0 <= n < 2**53 for n in numbers) or not 1 <= value["uses"] <= MAX_USES:
        raise TokenError("a token's uses and times are whole numbers (uses 1 to 10^9)")
    return EnrolmentToken(value["id"], tuple(names), value["uses"], value["issued_ms"], value["expires_ms"])
