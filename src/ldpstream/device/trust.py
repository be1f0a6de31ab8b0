"""What a device believes about a collection, and why: the checks of a pointer and a spec before they are used.

The device verifies before it believes, in this order, and refuses at the first rule broken (`TrustError.code`,
named by the test vectors under tests/vectors/):

pointer (`check_pointer`): its signature over the exact bytes by a pinned pointer key (`unsigned`,
`malformed_signature`, `untrusted_key`, `bad_signature`), then parsing (`malformed_pointer`), then
`wrong_collection` (a pointer for another collection), `issued_in_future` (issued later than the device's clock plus
the clock skew: accepted, its sequence would make every true pointer look like a rollback), `too_long` (valid for
longer than the protocol's `MAX_POINTER_VALIDITY_MS`: it would pin the device to its version), `rollback` (below
the (version, sequence) the device has accepted) and `expired` (the pointer no longer vouches for its version: the
device keeps its last good spec and stops reporting until a fresh pointer comes);

spec (`check_spec`): its signature over the exact bytes, bound to "name@version" of the pointer, by a pinned spec key
(the signature codes), then `hash_mismatch` (not the bytes the pointer names), then parsing (`malformed_spec`), then
`wrong_version` (the spec's own name and version differ from the pointer's).

Nothing in the bytes is parsed before its signature verifies. Then the app's policy decides
(`ldpstream.device.policy.judge`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ldpstream.contract.auth import MAX_SKEW_MS
from ldpstream.contract.pointer import MAX_POINTER_VALIDITY_MS, Pointer, PointerError, parse_pointer
from ldpstream.contract.signatures import SignatureError, TrustedKeys, pointer_message, spec_message, verify_block
from ldpstream.contract.spec import CollectionSpec, SpecError, parse_spec


class TrustError(ValueError):
    """A pointer or spec the device does not believe: `code` names the rule (module docstring), the message why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Seen:
    """The newest pointer a device accepted for a collection: it refuses anything older."""

    version: int = 0
    sequence: int = -1


def check_pointer(data: bytes, block: bytes | None, keys: TrustedKeys, collection: str, seen: Seen,
                  now_ms: int) -> Pointer:
    """The pointer in `data` if every rule holds (module docstring); TrustError otherwise, whatever the bytes."""
    try:
        verify_block(keys.pointer, block, pointer_message(data), f"pointer of {collection!r}")
    except SignatureError as exc:
        raise TrustError(exc.code, str(exc)) from None
    try:
        pointer = parse_pointer(data)
    except PointerError as exc:
        raise TrustError("malformed_pointer", str(exc)) from None
    if pointer.collection != collection:
        raise TrustError("wrong_collection", f"a pointer for {pointer.collection!r}, not {collection!r}")
    if pointer.issued_ms > now_ms + MAX_SKEW_MS:
        raise TrustError("issued_in_future", f"the pointer is issued at {pointer.issued_ms} ms, after the device's "
                                             f"clock ({now_ms} ms) and the clock skew")
    if pointer.expires_ms - pointer.issued_ms > MAX_POINTER_VALIDITY_MS:
        raise TrustError("too_long", f"the pointer is valid for {pointer.expires_ms - pointer.issued_ms} ms, more "
                                     f"than the {MAX_POINTER_VALIDITY_MS} ms a device accepts")
    if not pointer.newer_than(seen.version, seen.sequence):
        raise TrustError("rollback", f"pointer to version {pointer.version} (sequence {pointer.sequence}) is older "
                                     f"than version {seen.version} (sequence {seen.sequence}) already accepted")
    if pointer.expired(now_ms):
        raise TrustError("expired", f"the pointer expired at {pointer.expires_ms} ms (now {now_ms} ms): reports "
                                    f"stop until a fresh one comes")
    return pointer


def check_spec(data: bytes, block: bytes | None, keys: TrustedKeys, pointer: Pointer) -> CollectionSpec:
    """The spec in `data` if it is the signed document the pointer names (module docstring); TrustError
    otherwise, whatever the bytes."""
    key = f"{pointer.collection}@{pointer.version}"
    try:
        verify_block(keys.spec, block, spec_message(key.encode(), data), f"spec {key}")
    except SignatureError as exc:
        raise TrustError(exc.code, str(exc)) from None
    if hashlib.sha256(data).hexdigest() != pointer.content_hash:
        raise TrustError("hash_mismatch", f"spec {key}: its bytes are not those the pointer names")
    try:
        spec = parse_spec(data, key)
    except SpecError as exc:
        raise TrustError("malformed_spec", str(exc)) from None
    if spec.key != key:
        raise TrustError("wrong_version", f"the signed spec is {spec.key}, the pointer names {key}")
    return spec
