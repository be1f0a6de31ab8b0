"""The keys of the device join protocol, kept in the secrets directory (0600 each, made once by `ldp up`):

| file | who holds the private half | what it signs |
| --- | --- | --- |
| `spec-signing.key` (`ldpstream.runtime.signing`) | the admin, where `ldp spec publish` runs | specs |
| `spec-signing.next.key` | the same | specs, after the next rotation (apps pin it ahead) |
| `pointer-signing.key`, `pointer-signing.next.key` | the edge (online) | pointers to a collection's current version |
| `enrolment-token.key` | whoever mints enrolment tokens (the app's backend, `ldp devices mint-token`) | tokens |
| `enrolment-token.pub` | (public keys) the edge | what the edge accepts tokens signed by |

An app pins the spec and pointer keys, current and next (`pinned_keys`: what `ldp spec keys --json` prints), so a
rotation that promotes the next key needs no app update. The edge needs the pointer key and the enrolment public
keys, never the spec or token private keys: a compromised edge can freeze or roll devices back no further than the
pointers they already accepted, and cannot sign a spec or mint a token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ldpstream.contract.signatures import KeysById, PinnedKey, key_id
from ldpstream.runtime.secrets import create_secret
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import (
    SigningError,
    load_signing_key,
    new_private_key,
    parse_private,
    parse_trusted,
    private_pem,
    trust,
)


def next_spec_key_path(cfg: Settings) -> Path:
    """The spec-signing key that the next rotation promotes."""
    return cfg.spec_signing_key.with_name(cfg.spec_signing_key.stem + ".next.key")


def pointer_key_paths(cfg: Settings) -> tuple[Path, Path]:
    """The edge's pointer-signing key, current and next."""
    return cfg.pointer_signing_key, cfg.pointer_signing_key.with_name(cfg.pointer_signing_key.stem + ".next.key")


def ensure_key(path: Path) -> Ed25519PrivateKey:
    """The private key at `path`, made (0600) if missing."""
    return parse_private(create_secret(path, lambda: private_pem(new_private_key())), path)


def ensure_join_keys(cfg: Settings) -> str:
    """Make the join protocol's keys that are missing (module docstring); a line saying what there is."""
    ensure_key(next_spec_key_path(cfg))
    pointer = ensure_key(pointer_key_paths(cfg)[0])
    ensure_key(pointer_key_paths(cfg)[1])
    token = ensure_key(cfg.enrolment_token_key)
    trust(cfg.enrolment_trusted_keys, token.public_key())
    return (f"pointer key {key_id(pointer.public_key()).hex()} in {pointer_key_paths(cfg)[0]}; enrolment-token key "
            f"{key_id(token.public_key()).hex()} in {cfg.enrolment_token_key} (trusted in "
            f"{cfg.enrolment_trusted_keys})")


def load_pointer_key(cfg: Settings) -> Ed25519PrivateKey:
    """The edge's current pointer-signing key (SigningError if there is none)."""
    return load_signing_key(pointer_key_paths(cfg)[0])


def load_token_key(cfg: Settings) -> Ed25519PrivateKey:
    """The key that mints enrolment tokens (SigningError if this machine has none)."""
    return load_signing_key(cfg.enrolment_token_key)


def load_enrolment_keys(path: Path) -> KeysById:
    """The public keys the edge accepts enrolment tokens signed by, from their file (`Settings.enrolment_trusted_keys`;
    SigningError if there are none)."""
    try:
        keys = parse_trusted(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SigningError(f"no enrolment-token keys at {path} ({exc}): every token is refused; `ldp up` makes "
                           f"them (LDP_ENROLMENT_TRUSTED_KEYS names another file)") from exc
    if not keys:
        raise SigningError(f"{path} holds no enrolment-token key: every token is refused")
    return keys


def pinned_keys(cfg: Settings) -> dict[str, Any]:
    """What an app pins: the spec keys (the signing key and the next one) and the pointer keys (current and next),
    as `ldpstream.contract.signatures.TrustedKeys.from_json` reads them. SigningError if a key is missing."""
    entries: list[tuple[str, str, Ed25519PublicKey]] = [
        ("spec", "current", load_signing_key(cfg.spec_signing_key).public_key()),
        ("spec", "next", load_signing_key(next_spec_key_path(cfg)).public_key()),
        ("pointer", "current", load_signing_key(pointer_key_paths(cfg)[0]).public_key()),
        ("pointer", "next", load_signing_key(pointer_key_paths(cfg)[1]).public_key()),
    ]
    return {"keys": [PinnedKey(role, status, public).to_json() for role, status, public in entries]}
