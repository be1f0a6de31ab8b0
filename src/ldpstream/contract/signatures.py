"""Ed25519 signatures that devices check: on published specs (the admin's offline key) and on pointers to the
current version of a collection (the edge's online key), each with its own domain and its own pinned keys.

A signature block is 72 bytes: the signer's key id (the first 8 bytes of the sha256 of its raw public key) and the
Ed25519 signature (64 bytes). What a spec signature covers is `SPEC_DOMAIN`, the length of the spec's key
"name@version" (4 bytes, big-endian), that key, and the spec's exact bytes; what a pointer signature covers is
`POINTER_DOMAIN` and the pointer's exact bytes. The domains differ, and a device checks a spec only against its pinned
spec keys and a pointer only against its pinned pointer keys, so the online pointer key can sign nothing a device
would take for a spec, and no signature can be moved to another collection, version or kind of document.

Devices verify the raw bytes before parsing anything in them (`verify_block`): whatever the bytes and the block,
it returns or raises `SignatureError`, nothing else. The pinned keys are what `ldp spec keys --json` prints
(`TrustedKeys.from_json`): for each role, the current key and the next one, so a rotation needs no app update.

Examples
--------
>>> from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
>>> admin = Ed25519PrivateKey.generate()
>>> keys = {key_id(admin.public_key()): admin.public_key()}
>>> block = sign_block(admin, spec_message(b"app@1", b'{"name":"app"}'))
>>> verify_block(keys, block, spec_message(b"app@1", b'{"name":"app"}'), "app@1")
>>> verify_block(keys, block, spec_message(b"app@2", b'{"name":"app"}'), "app@2")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ldpstream.contract.signatures.SignatureError: app@2: bad signature by key ...
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # cryptography is loaded when a key is first read or used: an import of the device SDK stays light
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SPEC_DOMAIN = b"ldpstream collection spec signature v1\x00"
POINTER_DOMAIN = b"ldpstream collection pointer signature v1\x00"
KEY_ID_BYTES = 8
SIGNATURE_BYTES = 64
BLOCK_BYTES = KEY_ID_BYTES + SIGNATURE_BYTES
ROLES = ("spec", "pointer")  # which documents a pinned key may sign
MAX_PINNED = 16  # keys per role in a pinned-keys document: current, next, and a few during a slow rotation

KeysById = Mapping[bytes, "Ed25519PublicKey"]


class SignatureError(ValueError):
    """Bytes that are not signed by a pinned key of the right role: `code` says which rule failed (`unsigned`,
    `malformed_signature`, `untrusted_key`, `bad_signature`, `bad_keys`; the test vectors name them), the message
    why, never a secret."""

    def __init__(self, message: str, code: str = "bad_keys") -> None:
        super().__init__(message)
        self.code = code


def raw_public(public: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of a public key."""
    from cryptography.hazmat.primitives import serialization

    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> bytes:
    """The key's id: the first 8 bytes of the sha256 of its raw public key."""
    return hashlib.sha256(raw_public(public)).digest()[:KEY_ID_BYTES]


def spec_message(key: bytes, value: bytes) -> bytes:
    """What a spec's signature covers: the domain, the length of its key ("name@version"), the key, the spec's
    bytes."""
    return SPEC_DOMAIN + struct.pack(">I", len(key)) + key + value


def pointer_message(value: bytes) -> bytes:
    """What a pointer's signature covers: the domain and the pointer's bytes."""
    return POINTER_DOMAIN + value


def sign_block(private: Ed25519PrivateKey, message: bytes) -> bytes:
    """The 72-byte signature block of `message`: the signer's key id, then its signature."""
    return key_id(private.public_key()) + private.sign(message)


def verify_block(keys: KeysById, block: bytes | None, message: bytes, where: str) -> None:
    """Return if `block` is a signature of `message` by one of `keys`; SignatureError with the reason otherwise."""
    if block is None:
        raise SignatureError(f"{where}: unsigned (no signature)", "unsigned")
    if len(block) != BLOCK_BYTES:
        raise SignatureError(f"{where}: malformed signature ({len(block)} bytes, not {KEY_ID_BYTES} of key id and "
                             f"{SIGNATURE_BYTES} of signature)", "malformed_signature")
    signer, signature = bytes(block[:KEY_ID_BYTES]), bytes(block[KEY_ID_BYTES:])
    public = keys.get(signer)
    if public is None:
        raise SignatureError(f"{where}: signed by key {signer.hex()}, which is not trusted (trusted: "
                             f"{', '.join(k.hex() for k in keys) or 'none'})", "untrusted_key")
    from cryptography.exceptions import InvalidSignature

    try:
        public.verify(signature, message)
    except InvalidSignature:
        raise SignatureError(f"{where}: bad signature by key {signer.hex()} (the signed bytes or the signature "
                             f"were changed)", "bad_signature") from None


def block_header(block: bytes) -> str:
    """A signature block as the `LDP-Signature` HTTP header carries it: base64 (standard alphabet, padded)."""
    return base64.b64encode(block).decode()


def block_from_header(value: str | None) -> bytes | None:
    """The signature block of an `LDP-Signature` header (None if absent); SignatureError if it is not base64."""
    if value is None:
        return None
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("the LDP-Signature header is not base64", "malformed_signature") from None


@dataclass(frozen=True)
class PinnedKey:
    """A public key an app pins: its role (what it signs), its place in the rotation, and the key."""

    role: str
    status: str  # "current" or "next"
    public: Ed25519PublicKey

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "status": self.status, "id": key_id(self.public).hex(),
                "public_key": base64.b64encode(raw_public(self.public)).decode()}


@dataclass(frozen=True)
class TrustedKeys:
    """The keys a device pins, by role: what it accepts a spec or a pointer signed by."""

    spec: KeysById
    pointer: KeysById

    @classmethod
    def from_json(cls, data: Any) -> TrustedKeys:
        """The pinned keys from what `ldp spec keys --json` prints ({"keys": [{role, status, id, public_key}]});
        SignatureError if it is not that, a key's id does not match it, or a role has no key."""
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise SignatureError('pinned keys are a JSON object with a "keys" list (`ldp spec keys --json`)')
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        by_role: dict[str, dict[bytes, Ed25519PublicKey]] = {role: {} for role in ROLES}
        for entry in data["keys"]:
            if not isinstance(entry, dict) or entry.get("role") not in ROLES:
                raise SignatureError(f"a pinned key needs a role among {ROLES}: {str(entry)[:80]}")
            raw = entry.get("public_key")
            try:
                if not isinstance(raw, str):
                    raise TypeError("not text")
                public = Ed25519PublicKey.from_public_bytes(base64.b64decode(raw, validate=True))
            except (binascii.Error, ValueError, TypeError):
                raise SignatureError(f"a pinned {entry['role']} key is not a base64 Ed25519 public key") from None
            if entry.get("id") is not None and entry["id"] != key_id(public).hex():
                raise SignatureError(f"a pinned {entry['role']} key's id {str(entry['id'])[:20]} does not match it")
            by_role[entry["role"]][key_id(public)] = public
        for role, keys in by_role.items():
            if not keys:
                raise SignatureError(f"no pinned {role} key: every {role} would be refused")
            if len(keys) > MAX_PINNED:
                raise SignatureError(f"{len(keys)} pinned {role} keys (at most {MAX_PINNED})")
        return cls(by_role["spec"], by_role["pointer"])
