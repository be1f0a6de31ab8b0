"""Fuzzing support: mutations of valid messages (what a flaky link, a buggy producer or an attacker sends instead
of a valid message), and a spy on the batch steps' safety net.

Each mutation is a plain function of the valid bytes and a `random.Random`, so that hypothesis drives them (through
a Random it seeds: `mutated`) and the live stream test seeds them itself (`mutate`). Byte-level mutations (bit
flips, truncation, appended garbage, insertions, deletions, random bytes, empty, ~1 MB) apply to any format; the
msgpack-aware ones decode the message's tree, put a hostile value in place of one node (a string with invalid
UTF-8, deep or huge containers, a ~1 MB value, odd ints and floats, other types, ext types), drop, repeat or add
an array's element, or convert a wire column's values to another dtype, and encode the tree again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import msgspec
import numpy as np
from hypothesis import strategies as st

from ldpstream.contract.wire import ALLOWED_DTYPES
from ldpstream.runtime.dlq import DeadLetter, Message, isolating

ABOUT_1MB = 900_000  # "~1 MB", and under Kafka's default limit of 1,000,000 bytes a message
WIRE_DTYPES = sorted(ALLOWED_DTYPES)
INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"ok\x80")


def bit_flips(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncated(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))] if data else data


def appended(data: bytes, rng: random.Random) -> bytes:
    return data + rng.randbytes(rng.randint(1, 64))


def inserted(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        out[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(out)


def deleted(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        at = rng.randrange(len(out))
        del out[at:at + rng.randint(1, 8)]
    return bytes(out)


def random_bytes(data: bytes, rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 2 * len(data) + 16))


def empty(data: bytes, rng: random.Random) -> bytes:
    return b""


def megabyte(data: bytes, rng: random.Random) -> bytes:
    """About 1 MB: the message followed by a repeated random pattern."""
    return data + rng.randbytes(16) * (ABOUT_1MB // 16)


def hostile_value(rng: random.Random) -> Any:
    """A value that a well-formed message of ours never holds where it is put."""
    choice = rng.randrange(12)
    if choice == 0:  # a msgpack str whose bytes are not UTF-8 (the string a producer cannot have encoded)
        raw = rng.choice(INVALID_UTF8)
        return msgspec.Raw(bytes([0xA0 | len(raw)]) + raw)
    if choice == 1:
        return msgspec.Raw(b"\x91" * rng.choice([100, 1000, 100_000]) + b"\x00")  # deep nesting
    if choice == 2:
        return list(range(rng.choice([1000, 100_000])))  # a huge container
    if choice == 3:
        return rng.randbytes(16) * (ABOUT_1MB // 16)  # ~1 MB bytes
    if choice == 4:
        return "é" * (ABOUT_1MB // 2)  # ~1 MB str
    if choice == 5:
        return rng.choice([0, -1, 1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1])
    if choice == 6:
        return rng.choice([float("nan"), float("inf"), -0.0, 1e308])
    if choice == 7:
        return rng.choice([None, True, False, "", b"", [], {}])
    if choice == 8:
        return {"key": rng.randbytes(4), 1: [2]}
    if choice == 9:  # ext types: an application ext, a timestamp ext with nanoseconds out of range
        return msgspec.Raw(rng.choice([b"\xd4\x01\x00", b"\xd7\xff" + b"\xff" * 8, b"\xd6\xff\x00\x00\x00\x01"]))
    if choice == 10:  # a container header that promises far more than the message holds
        return msgspec.Raw(rng.choice([b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"]))
    return rng.randbytes(rng.randint(0, 24))


MAX_TREE_DEPTH = 64  # a byte mutation can make deeply nested msgpack (b"\x91" * 100000): walked by bytes instead


def _tree(data: bytes) -> Any:
    """The decoded msgpack tree of `data`, or None if it is not msgpack or nests deeper than MAX_TREE_DEPTH (the
    tree mutations recurse through it)."""
    try:
        tree = msgspec.msgpack.decode(data)
    except Exception:  # noqa: BLE001 - not msgpack: the caller mutates its bytes instead
        return None
    level = [tree]
    for _ in range(MAX_TREE_DEPTH):
        level = [c for node in level for c in (node if isinstance(node, list) else
                                                node.values() if isinstance(node, dict) else ())]
        if not level:
            return tree
    return None


def tree_paths(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every node of a decoded msgpack tree (the root is the empty path)."""
    found = [path]
    if isinstance(tree, list):
        for i, child in enumerate(tree):
            found += tree_paths(child, (*path, i))
    elif isinstance(tree, dict):
        for key, child in tree.items():
            found += tree_paths(child, (*path, key))
    return found


def _replaced(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    tree[path[0]] = _replaced(tree[path[0]], path[1:], value)
    return tree


def tree_node(data: bytes, rng: random.Random) -> bytes:
    """One node of the message's msgpack tree replaced by a hostile value (a byte mutation if it does not decode)."""
    tree = _tree(data)
    if tree is None:
        return bit_flips(data, rng)
    path = rng.choice(tree_paths(tree))
    return msgspec.msgpack.encode(_replaced(tree, path, hostile_value(rng)))


def tree_items(data: bytes, rng: random.Random) -> bytes:
    """An array of the message's tree with an element dropped, repeated or added (a field too few or too many)."""
    tree = _tree(data)
    if tree is None:
        return deleted(data, rng)
    arrays = [p for p in tree_paths(tree) if isinstance(_at(tree, p), list) and _at(tree, p)]
    if not arrays:
        return appended(data, rng)
    array = _at(tree, rng.choice(arrays))
    at = rng.randrange(len(array))
    action = rng.randrange(3)
    if action == 0:
        del array[at]
    elif action == 1:
        array.insert(at, array[at])
    else:
        array.append(hostile_value(rng))
    return msgspec.msgpack.encode(tree)


def retyped(data: bytes, rng: random.Random) -> bytes:
    """A wire column ([name, dtype, data]) with its values converted to another dtype the wire carries (floats for
    integers, unsigned for signed, narrower types): well formed, but not the mechanism's declared column."""
    tree = _tree(data)
    if tree is None:
        return bit_flips(data, rng)
    columns = [p for p in tree_paths(tree) if _is_column(_at(tree, p))]
    if not columns:
        return tree_node(data, rng)
    column = _at(tree, rng.choice(columns))
    dtype = rng.choice(WIRE_DTYPES)
    with np.errstate(all="ignore"):
        column[2] = np.frombuffer(column[2], dtype=column[1]).astype(dtype).tobytes()
    column[1] = dtype
    return msgspec.msgpack.encode(tree)


def _is_column(node: Any) -> bool:
    return (isinstance(node, list) and len(node) == 3 and isinstance(node[0], str) and node[1] in WIRE_DTYPES
            and isinstance(node[2], bytes) and len(node[2]) % np.dtype(node[1]).itemsize == 0)


def _at(tree: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    f.__name__: f for f in (bit_flips, truncated, appended, inserted, deleted, random_bytes, empty, megabyte,
                            tree_node, tree_items, retyped)}


KINDS = sorted(MUTATIONS)
WEIGHTS = [{"empty": 1, "megabyte": 1, "random_bytes": 2}.get(kind, 4) for kind in KINDS]  # the rest say more


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three mutations of `data` (kinds drawn from `rng`), different from `data`."""
    out = data
    while out == data:
        for kind in rng.choices(KINDS, WEIGHTS, k=rng.randint(1, 3)):
            out = MUTATIONS[kind](out, rng)
    return out


def mutated(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Mutations of the valid messages `valid` draws (the mutations' random choices seeded by hypothesis)."""
    return st.builds(mutate, valid, st.randoms(use_true_random=True))


def untrusted(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """What a consumer may read instead of a valid message: a mutation of one, or arbitrary bytes."""
    return st.one_of(mutated(valid), st.binary(max_size=512))


@contextmanager
def isolations(module: str) -> Iterator[list[DeadLetter]]:
    """Collect the dead letters that `ldpstream.runtime.dlq.isolating` takes out in `module` (a batch step's safety
    net): a
    fuzz test expects none, since every rejection should come from a check, not from an exception."""
    isolated: list[DeadLetter] = []

    def spying(step: Callable[[Sequence[Message]], Any], messages: Sequence[Message],
               reason: str) -> tuple[Any, list[DeadLetter]]:
        result, letters = isolating(step, messages, reason)
        isolated.extend(letters)
        return result, letters

    with mock.patch(f"{module}.isolating", spying):
        yield isolated
