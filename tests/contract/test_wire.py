"""The wire format: golden bytes, append-only evolution, clear reasons for messages that cannot be decoded, and
micro-batches of messages decoded as one concatenation."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pytest

from ldpstream.contract.wire import (
    WIRE_VERSION,
    AttributeColumns,
    AttributeReports,
    Concatenation,
    Envelope,
    PerturbedBatch,
    WireError,
    check_envelope,
    concatenate,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
    envelope_of,
    join_envelopes,
    perturbed_batch,
)

# encode(golden_batch()) under wire version 1; a change here breaks every reader in the field.
GOLDEN_V1 = bytes.fromhex(
    "9601a46469616703c41001000000000000000500000000000080c4100068e5cf8b0100000168e5cf8b010000929300c40800000000"
    "010000009193a576616c7565a33c6638c410000000000000e03f000000000000f4bf9302c404010000009293a3626974a37c7531c4"
    "010193a5696e646578a33c6938c4080300000000000000"
)


def golden_batch() -> PerturbedBatch:
    return perturbed_batch(
        "diag", 3, np.array([1, 2**63 + 5], dtype=np.uint64), np.array([1_700_000_000_000, 1_700_000_000_001]),
        (AttributeReports(0, np.array([0, 1]), {"value": np.array([0.5, -1.25])}),
         AttributeReports(2, np.array([1]), {"index": np.array([3]), "bit": np.array([1], dtype=np.uint8)})))


def assert_golden(decoded: object) -> None:
    assert decoded.collection == "diag" and decoded.spec_version == 3  # type: ignore[attr-defined]
    np.testing.assert_array_equal(decoded.devices, np.array([1, 2**63 + 5], dtype=np.uint64))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(decoded.timestamps_ms, [1_700_000_000_000, 1_700_000_000_001])  # type: ignore[attr-defined]
    first, second = decoded.attributes  # type: ignore[attr-defined]
    assert first.attribute == 0 and second.attribute == 2
    np.testing.assert_array_equal(first.rows, [0, 1])
    np.testing.assert_array_equal(first.reports["value"], [0.5, -1.25])
    np.testing.assert_array_equal(second.rows, [1])
    assert second.reports["index"].dtype == np.dtype("<i8") and second.reports["bit"].dtype == np.uint8
    assert (second.reports["index"][0], second.reports["bit"][0]) == (3, 1)


def test_wire_version_is_1() -> None:
    assert WIRE_VERSION == 1


def test_encode_gives_the_golden_bytes() -> None:
    assert encode(golden_batch()) == GOLDEN_V1


def test_golden_bytes_decode() -> None:
    assert_golden(decode(GOLDEN_V1))


def test_trailing_fields_from_a_later_version_are_ignored_at_every_level() -> None:
    envelope = msgspec.msgpack.decode(GOLDEN_V1)
    envelope.append({"added": "later"})
    envelope[5][0].append(42)  # an attribute block field
    envelope[5][0][2][0].append(None)  # a column field
    assert_golden(decode(msgspec.msgpack.encode(envelope)))


def test_unknown_version_is_named() -> None:
    envelope = msgspec.msgpack.decode(GOLDEN_V1)
    envelope[0] = 2
    with pytest.raises(WireError, match="unknown wire version 2"):
        decode(msgspec.msgpack.encode(envelope))


@pytest.mark.parametrize("cut", [1, 10, len(GOLDEN_V1) // 2, len(GOLDEN_V1) - 1])
def test_truncated_msgpack_is_malformed(cut: int) -> None:
    with pytest.raises(WireError, match="malformed envelope.*truncated"):
        decode(GOLDEN_V1[:cut])


def test_random_bytes_and_wrong_shapes_give_reasons() -> None:
    with pytest.raises(WireError, match="malformed envelope"):
        decode(b"\xc1not msgpack")
    envelope = msgspec.msgpack.decode(GOLDEN_V1)
    envelope[4] = envelope[4][:8]  # one timestamp for two devices
    with pytest.raises(WireError, match="2 devices but 1 timestamps"):
        decode(msgspec.msgpack.encode(envelope))


def test_a_batch_cannot_be_made_outside_perturb() -> None:
    with pytest.raises(TypeError, match="only by ldpstream.device.perturb"):
        PerturbedBatch("diag", 1, np.zeros(1, np.uint64), np.zeros(1, np.int64), ())
    with pytest.raises(TypeError, match="only a PerturbedBatch"):
        encode({"collection": "diag", "battery_level": [42.0]})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# micro-batches: many messages decoded into one set of columns


def random_messages(seed: int) -> list[bytes]:
    """Single-device and many-device envelopes, each with its own subset of attributes in its own order; attribute 3
    has a column whose dtype differs between messages."""
    rng = np.random.default_rng(seed)
    values = []
    for i in range(int(rng.integers(2, 12))):
        n = 1 if i == 0 or (i > 1 and rng.random() < 0.5) else int(rng.integers(2, 40))
        attributes = set(rng.choice(6, size=int(rng.integers(0, 7)), replace=False).tolist())
        blocks = []
        for attribute in rng.permutation(sorted(attributes | ({3} if i < 2 else set()))).tolist():
            rows = np.sort(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False))
            columns = {"value": rng.normal(size=len(rows)),
                       "pair": rng.integers(0, 9, size=2 * len(rows)).astype("<u2")}
            if attribute == 3:
                columns["mixed"] = rng.integers(-9, 9, size=len(rows)).astype(["<i4", "<f8", "|i1"][i % 3])
            blocks.append(AttributeReports(attribute, rows, columns))
        devices = rng.integers(0, 2**63, size=n, dtype=np.uint64)
        timestamps = rng.integers(1_700_000_000_000, 1_800_000_000_000, size=n)
        values.append(encode(perturbed_batch("diag", 3, devices, timestamps, tuple(blocks))))
    return values


def per_message(values: list[bytes]) -> Concatenation:
    """What `concatenate` must give: each message decoded alone, then its arrays concatenated (rows shifted)."""
    decoded = [decode(v) for v in values]
    bases = np.cumsum([0, *(len(d) for d in decoded)])[:-1]
    attributes = {}
    for attribute in dict.fromkeys(b.attribute for d in decoded for b in d.attributes):
        parts = [(base, b) for base, d in zip(bases, decoded, strict=True) for b in d.attributes
                 if b.attribute == attribute]
        rows = np.concatenate([b.rows.astype(np.int64) + base for base, b in parts])
        columns = {k: np.concatenate([b.reports[k] for _, b in parts]) for k in parts[0][1].reports}
        attributes[attribute] = AttributeColumns(rows, columns)
    return Concatenation(np.arange(len(values)), np.array([len(d) for d in decoded]),
                         np.concatenate([d.devices for d in decoded]),
                         np.concatenate([d.timestamps_ms for d in decoded]), attributes, {})


def assert_same(got: Concatenation, expected: Concatenation) -> None:
    np.testing.assert_array_equal(got.sizes, expected.sizes)
    for name in ("devices", "timestamps_ms"):
        a, b = getattr(got, name), getattr(expected, name)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert set(got.attributes) == set(expected.attributes)
    for attribute, want in expected.attributes.items():
        have = got.attributes[attribute]
        np.testing.assert_array_equal(have.rows, want.rows)
        assert set(have.columns) == set(want.columns)
        for name, column in want.columns.items():
            assert have.columns[name].dtype == column.dtype, (attribute, name)
            np.testing.assert_array_equal(have.columns[name], column)


@pytest.mark.parametrize("seed", range(12))
def test_a_concatenation_equals_the_messages_decoded_one_by_one(seed: int) -> None:
    values = random_messages(seed)
    envelopes = [decode_envelope(v) for v in values]
    assert [check_envelope(e) for e in envelopes] == [len(decode(v)) for v in values]
    joined = concatenate(envelopes)
    assert joined.rejected == {}
    np.testing.assert_array_equal(joined.messages, np.arange(len(values)))
    assert_same(joined, per_message(values))
    assert joined.attributes[3].columns["mixed"].dtype == np.float64  # <i4, <f8 and |i1 messages, promoted


def test_a_concatenation_of_one_message_is_that_message() -> None:
    joined = concatenate([decode_envelope(GOLDEN_V1)])
    assert_golden(decode(GOLDEN_V1))
    assert_same(joined, per_message([GOLDEN_V1]))


@pytest.mark.parametrize("seed", range(12))
def test_joined_envelopes_are_the_envelope_of_their_concatenation(seed: int) -> None:
    """The edge's and the outbox's re-batching, from the bytes: the same message as decoding every column,
    concatenating and encoding again (attributes in any order, some absent, one column's dtype differing)."""
    envelopes = [decode_envelope(v) for v in random_messages(seed)]
    for some in (envelopes, envelopes[:1], envelopes[1:2], envelopes[::-1]):
        joined = concatenate(some)
        expected = envelope_of("diag", 3, joined.devices, joined.timestamps_ms, joined.attributes)
        assert encode_envelope(join_envelopes(some)) == encode_envelope(expected)


def test_joining_envelopes_with_different_columns_for_an_attribute_is_refused() -> None:
    golden = decode_envelope(GOLDEN_V1)
    block = golden.attributes[1]
    other = msgspec.structs.replace(golden, attributes=[msgspec.structs.replace(block, columns=block.columns[:1])])
    with pytest.raises(WireError, match="different columns"):
        join_envelopes([golden, other])


def u4(*rows: int) -> bytes:
    return np.array(rows, dtype="<u4").tobytes()


def _set(path: tuple[int, ...], value: Any) -> Callable[[list[Any]], None]:
    """A mutation of the raw envelope: the item at `path` becomes `value` (or `value` of it, if callable)."""
    def mutate(envelope: list[Any]) -> None:
        target = envelope
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value(target[path[-1]]) if callable(value) else value
    return mutate


# the golden envelope: 2 devices; attribute 0 rows [0, 1] with column value <f8; attribute 2 rows [1] with columns
# bit |u1 and index <i8. Each mutation breaks one check; the reason `decode` gives.
LENGTH_CASES: dict[str, tuple[Callable[[list[Any]], None], str]] = {
    "unknown version": (_set((0,), 2), "unknown wire version 2"),
    "not an envelope": (_set((1,), 5), "malformed envelope: Expected `str`"),
    "devices not whole": (_set((3,), lambda b: b[:-1]), "devices: 15 bytes is not a whole number of <u8 values"),
    "timestamps not whole": (_set((4,), lambda b: b[:-1]), "timestamps: 15 bytes is not a whole number of <i8 values"),
    "fewer timestamps": (_set((4,), lambda b: b[:8]), "2 devices but 1 timestamps"),
    "empty": (lambda e: e.__setitem__(slice(3, 6), [b"", b"", []]), "empty envelope"),
    "attribute repeated": (_set((5, 1, 0), 0), "attribute 0 repeated or negative"),
    "attribute negative": (_set((5, 0, 0), -1), "attribute -1 repeated or negative"),
    "rows not whole": (_set((5, 0, 1), lambda b: b[:-1]), "rows: 7 bytes is not a whole number of <u4 values"),
    "more rows than devices": (_set((5, 1, 1), u4(0, 1, 1)), "attribute 2: rows must be strictly increasing and < 2"),
    "dtype not on the wire": (_set((5, 0, 2, 0, 1), ">f8"), "attribute 0: column 'value' has dtype '>f8'"),
    "column repeated": (lambda e: e[5][1][2].append(e[5][1][2][0]), "attribute 2: column 'bit' repeated"),
    "data not whole": (_set((5, 0, 2, 0, 2), lambda b: b[:-1]), "value: 15 bytes is not a whole number of <f8 values"),
}
ROW_CASES: dict[str, tuple[Callable[[list[Any]], None], str]] = {
    "rows decreasing": (_set((5, 0, 1), u4(1, 0)), "attribute 0: rows must be strictly increasing and < 2"),
    "row repeated": (_set((5, 0, 1), u4(1, 1)), "attribute 0: rows must be strictly increasing and < 2"),
    "row >= n": (_set((5, 1, 1), u4(2)), "attribute 2: rows must be strictly increasing and < 2"),
    "row far beyond n": (_set((5, 1, 1), u4(2**32 - 1)), "attribute 2: rows must be strictly increasing and < 2"),
}


def broken(mutate: Callable[[list[Any]], None]) -> bytes:
    """The golden message with one mutation."""
    envelope = msgspec.msgpack.decode(GOLDEN_V1)
    mutate(envelope)
    return msgspec.msgpack.encode(envelope)


def micro_batch(values: list[bytes]) -> tuple[Concatenation, list[Envelope], dict[int, str]]:
    """As the aggregator decodes a micro-batch: each message decoded and checked alone, the rest concatenated.
    The concatenation, the envelopes it was given, and the reason of each rejected message (by its index)."""
    envelopes: dict[int, Envelope] = {}
    reasons: dict[int, str] = {}
    for i, value in enumerate(values):
        try:
            envelope = decode_envelope(value)
            check_envelope(envelope)
        except WireError as exc:
            reasons[i] = str(exc)
        else:
            envelopes[i] = envelope
    joined = concatenate(list(envelopes.values()))
    index = list(envelopes)
    reasons |= {index[m]: reason for m, reason in joined.rejected.items()}
    return joined, [envelopes[index[m]] for m in joined.messages.tolist()], reasons


@pytest.mark.parametrize("case", [*LENGTH_CASES, *ROW_CASES])
def test_every_malformed_message_is_rejected_alone_with_its_reason(case: str) -> None:
    mutate, reason = {**LENGTH_CASES, **ROW_CASES}[case]
    bad = broken(mutate)
    with pytest.raises(WireError, match=f"^{re.escape(reason)}"):
        decode(bad)
    neighbours = random_messages(7)
    values = [neighbours[0], bad, *neighbours[1:], bad]
    joined, kept, reasons = micro_batch(values)
    assert {i: r[:len(reason)] for i, r in reasons.items()} == {1: reason, len(values) - 1: reason}
    assert kept == [decode_envelope(v) for v in neighbours]
    assert_same(joined, per_message(neighbours))
    # the checks on byte lengths catch a message before the concatenation; those on row values, in it
    assert set(joined.rejected) == ({1, len(values) - 1} if case in ROW_CASES else set())


def test_rows_restart_in_every_message_and_blocks_may_be_empty() -> None:
    def one(n: int, rows: list[int]) -> bytes:
        block = AttributeReports(0, np.array(rows), {"value": np.arange(len(rows), dtype=np.float64)})
        return encode(perturbed_batch("diag", 3, np.arange(n, dtype=np.uint64), np.zeros(n, dtype=np.int64), (block,)))

    values = [one(2, [0, 1]), one(1, [0]), one(3, []), one(2, [1]), one(4, [0, 3])]
    joined, _, reasons = micro_batch(values)
    assert reasons == {}
    np.testing.assert_array_equal(joined.attributes[0].rows, [0, 1, 2, 7, 8, 11])
    assert_same(joined, per_message(values))


def test_messages_with_different_columns_for_an_attribute_cannot_be_concatenated() -> None:
    other = broken(_set((5, 0, 2, 0, 0), "other"))
    concatenate([decode_envelope(other)])  # alone it is well formed
    with pytest.raises(WireError, match="attribute 0: the messages carry different columns"):
        concatenate([decode_envelope(GOLDEN_V1), decode_envelope(other)])


def test_a_string_that_is_not_utf8_is_a_wire_error() -> None:
    body = msgspec.msgpack.encode([1, "c", 1, b"", b"", []]).replace(b"\xa1c", b"\xa1\xf7")
    with pytest.raises(WireError, match="malformed envelope"):
        decode_envelope(body)
