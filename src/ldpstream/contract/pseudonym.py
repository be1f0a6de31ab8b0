"""Device pseudonyms: the uint64 that names a device on the wire, never its raw identifier.

The hash is keyed by the collection's name, so one device has unlinkable pseudonyms in different collections:

- an integer id i in [0, 2^64): SplitMix64's finalizer (Steele, Lea, Flood 2014) of (i + salt) mod 2^64, with
  salt = the first 8 bytes (little endian) of blake2b(collection name, person=b"ldp-pseudonym"). The finalizer is a
  bijection of 64-bit words, so distinct ids always get distinct pseudonyms (the fleet simulator relies on it);
- a string id: the first 8 bytes (little endian) of blake2b(UTF-8 id, key=collection name, person=b"ldp-device").

A single report's Kafka key is its pseudonym as 8 little-endian bytes (`pseudonym_key`); every report of a device goes
to the partition `device_partitions` names.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ldpstream.mechanisms.hashing import mix64

_UINT64_MAX = 2**64 - 1


def collection_salt(collection: str) -> np.uint64:
    digest = hashlib.blake2b(collection.encode(), digest_size=8, person=b"ldp-pseudonym").digest()
    return np.uint64(int.from_bytes(digest, "little"))


def integer_pseudonyms(collection: str, ids: np.ndarray) -> np.ndarray:
    """uint64 pseudonyms of integer device ids (vectorised; distinct ids give distinct pseudonyms)."""
    x = np.asarray(ids)
    if x.dtype.kind not in "iu":
        raise ValueError(f"device ids must be integers, got dtype {x.dtype}")
    if x.dtype.kind == "i" and x.size and x.min() < 0:
        raise ValueError("device ids must be >= 0")
    with np.errstate(over="ignore"):
        return mix64(x.astype(np.uint64) + collection_salt(collection))


def device_pseudonym(collection: str, device_id: int | str) -> int:
    """The pseudonym of one device (integer ids as in `integer_pseudonyms`, strings by keyed blake2b)."""
    if isinstance(device_id, bool):
        raise ValueError("a device id is an integer or a string, not a bool")
    if isinstance(device_id, int | np.integer):
        if not 0 <= int(device_id) <= _UINT64_MAX:
            raise ValueError(f"an integer device id must lie in [0, 2^64), got {device_id}")
        return int(integer_pseudonyms(collection, np.array([int(device_id)], dtype=np.uint64))[0])
    if isinstance(device_id, str):
        if not device_id:
            raise ValueError("a device id must not be empty")
        digest = hashlib.blake2b(device_id.encode(), digest_size=8, key=collection.encode()[:64], person=b"ldp-device")
        return int.from_bytes(digest.digest(), "little")
    raise ValueError(f"a device id is an integer or a string, got {type(device_id).__name__}")


def pseudonym_key(pseudonym: int) -> bytes:
    """The Kafka key of a single report: the pseudonym as 8 little-endian bytes.

    Examples
    --------
    >>> pseudonym_key(258)
    b'\\x02\\x01\\x00\\x00\\x00\\x00\\x00\\x00'
    """
    return int(pseudonym).to_bytes(8, "little")


def device_partitions(pseudonyms: np.ndarray, partitions: int) -> np.ndarray:
    """The partition of the report topic that each device's reports go to: its pseudonym mod the partition count.

    All of a device's reports then meet in one partition, so one worker can tell alone whether the device has
    already reported in a window (`ldpstream.aggregator.dedupe`).

    Examples
    --------
    >>> device_partitions(np.array([7, 8, 2**64 - 1], dtype=np.uint64), 8).tolist()
    [7, 0, 7]
    """
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (np.asarray(pseudonyms, dtype=np.uint64) % np.uint64(partitions)).astype(np.int64)
