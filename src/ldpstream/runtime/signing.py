"""Ed25519 signatures on published collection specs: the admin signs each message, every reader verifies it.

A spec message (key "name@version", value the spec's canonical JSON) carries its signature in the Kafka header
`ldp-sig`: the signature block of `ldpstream.contract.signatures` (the signer's key id and the Ed25519 signature of
the spec's domain, key and value), so a signature can neither be moved to another key nor taken for a signature of
anything else this project signs. The value stays the canonical JSON, unchanged: the edge serves those exact bytes
and that block to devices, which verify them against the keys they pin.

Key files (`ldpstream.runtime.secrets`, 0600): the admin's private key, PEM (PKCS#8), in `Settings.spec_signing_key`;
the trusted public keys in `Settings.spec_trusted_keys`, one a line (base64 of the 32 raw bytes, then optionally a
comment; blank lines and lines starting with # are skipped), so that a rotation can trust the old and the new key for a
while. `ensure_signing_keys` makes the pair if missing (`ldp up` calls it).

Examples
--------
>>> admin = new_private_key()
>>> trusted = {key_id(admin.public_key()): admin.public_key()}
>>> header = sign(admin, b"app@1", b'{"name":"app"}')
>>> verify(trusted, b"app@1", b'{"name":"app"}', ((SIGNATURE_HEADER, header),), "specs[app@1]")
>>> verify(trusted, b"app@2", b'{"name":"app"}', ((SIGNATURE_HEADER, header),), "specs[app@2]")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ldpstream.contract.spec.SpecError: specs[app@2]: bad signature by key ... (the signed bytes or the signature were
changed)
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ldpstream.contract.signatures import SignatureError, key_id, raw_public, sign_block, spec_message, verify_block
from ldpstream.contract.spec import SpecError
from ldpstream.runtime.kafka import Headers
from ldpstream.runtime.secrets import create_secret, replace_secret

SIGNATURE_HEADER = "ldp-sig"

TrustedKeys = Mapping[bytes, Ed25519PublicKey]  # key id -> public key


class SigningError(RuntimeError):
    """A key file is missing or unreadable, or a key is not trusted where it must be."""


def new_private_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 private key."""
    return Ed25519PrivateKey.generate()


def sign(private: Ed25519PrivateKey, key: bytes, value: bytes) -> bytes:
    """The `ldp-sig` header value of a message: the signature block of its key and value."""
    return sign_block(private, spec_message(key, value))


def verify(trusted: TrustedKeys, key: bytes, value: bytes, headers: Headers | None, where: str) -> None:
    """Return if exactly one `ldp-sig` header holds a valid signature of (key, value) by a trusted key; SpecError
    with the reason otherwise, whatever the headers hold (`headers` None: the client could not decode them)."""
    if headers is None:
        raise SpecError(f"{where}: its headers cannot be read (a header name that is not UTF-8); not signed by us")
    found = [v for name, v in headers if name == SIGNATURE_HEADER]
    if not found:
        raise SpecError(f"{where}: unsigned (no {SIGNATURE_HEADER} header); specs are published with "
                        f"`ldp spec publish`, which signs them")
    if len(found) > 1:
        raise SpecError(f"{where}: {len(found)} {SIGNATURE_HEADER} headers; a published spec has one")
    try:
        verify_block(trusted, found[0] or b"", spec_message(key, value), where)
    except SignatureError as exc:
        raise SpecError(str(exc)) from None


def private_pem(private: Ed25519PrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM (the key file's format)."""
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


def public_line(public: Ed25519PublicKey) -> str:
    """A public key as a line of the trusted keys file: base64 of its raw bytes, then its id as a comment."""
    return f"{base64.b64encode(raw_public(public)).decode()} spec-signing key {key_id(public).hex()}\n"


def parse_private(data: bytes, path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in PEM `data` (read from `path`); SigningError if it is not one."""
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{path}: not a PEM private key ({exc})") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise SigningError(f"{path}: not an Ed25519 private key")
    return private


def parse_trusted(text: str, path: Path) -> dict[bytes, Ed25519PublicKey]:
    """The public keys of a trusted keys file by id; SigningError naming the line of a key that is not one."""
    keys: dict[bytes, Ed25519PublicKey] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            public = Ed25519PublicKey.from_public_bytes(base64.b64decode(line.split()[0], validate=True))
        except ValueError as exc:  # bad base64 (binascii.Error) or not 32 bytes
            raise SigningError(f"{path}:{number}: not a base64 Ed25519 public key ({exc})") from exc
        keys[key_id(public)] = public
    return keys


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The admin's private key from its file; SigningError if there is none or it is not a key."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningError(f"no spec-signing key at {path} ({exc.strerror}): `ldp up` or `ldp spec keys init` "
                           f"makes one (LDP_SPEC_SIGNING_KEY names another file)") from exc
    return parse_private(data, path)


def load_trusted_keys(path: Path) -> dict[bytes, Ed25519PublicKey]:
    """The trusted public keys by id; SigningError if the file is missing, unreadable or holds none: a reader
    without trusted keys refuses every spec."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningError(f"no trusted spec-signing keys at {path} ({exc}): every published spec is refused; "
                           f"`ldp up` or `ldp spec keys init` makes them (LDP_SPEC_TRUSTED_KEYS names another "
                           f"file)") from exc
    keys = parse_trusted(text, path)
    if not keys:
        raise SigningError(f"{path} holds no trusted spec-signing key: every published spec is refused")
    return keys


def trust(path: Path, public: Ed25519PublicKey) -> bool:
    """Add a public key to the trusted keys file (made if missing); False if it was trusted already."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if key_id(public) in parse_trusted(text, path):
        return False
    replace_secret(path, (text + ("" if not text or text.endswith("\n") else "\n") + public_line(public)).encode())
    return True


def retain_only(path: Path, public: Ed25519PublicKey) -> list[bytes]:
    """Trust only `public` from now on: rewrite the trusted keys file with its line alone; the ids dropped."""
    dropped = [k for k in load_trusted_keys(path) if k != key_id(public)]
    replace_secret(path, public_line(public).encode())
    return dropped


def ensure_signing_keys(private_path: Path, trusted_path: Path) -> str:
    """Make the admin's key pair if it is missing, and trust its public key; a line saying what there is."""
    made = not private_path.exists()
    private = parse_private(create_secret(private_path, lambda: private_pem(new_private_key())), private_path)
    added = trust(trusted_path, private.public_key())
    return (f"key {key_id(private.public_key()).hex()} ({'made now' if made else 'kept'}) in {private_path}; "
            f"{'added to' if added else 'already in'} the trusted keys {trusted_path}")
