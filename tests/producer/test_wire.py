"""The wire format: golden bytes, append-only evolution, and clear reasons for messages that cannot be decoded."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from producer.wire import (
    WIRE_VERSION,
    AttributeReports,
    PerturbedBatch,
    WireError,
    decode,
    encode,
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
    with pytest.raises(TypeError, match="only by producer.perturb"):
        PerturbedBatch("diag", 1, np.zeros(1, np.uint64), np.zeros(1, np.int64), ())
    with pytest.raises(TypeError, match="only a PerturbedBatch"):
        encode({"collection": "diag", "battery_level": [42.0]})  # type: ignore[arg-type]
