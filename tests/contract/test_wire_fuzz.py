"""The report wire format's decoders take outside bytes: whatever they are, each returns a valid object or raises
WireError, nothing else (`leading_version`: an int or None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.contract.wire import (
    WIRE_VERSION,
    AttributeReports,
    Envelope,
    WireError,
    check_envelope,
    concatenate,
    decode,
    decode_envelope,
    encode,
    encode_envelope,
    envelope_of,
    join_envelopes,
    leading_version,
    perturbed_batch,
)
from tests.fuzzing import INVALID_UTF8, untrusted

T = TypeVar("T")
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def envelope_bytes(seed: int, collection: str = "fuzz", version: int = 1) -> bytes:
    """A valid envelope: 1-4 devices, each attribute of 0-3 reported by some of them, columns of several dtypes."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5))
    blocks = []
    for attribute in sorted(rng.choice(4, size=int(rng.integers(0, 4)), replace=False).tolist()):
        rows = np.flatnonzero(rng.random(n) < 0.6) if n > 1 else np.zeros(1, dtype=np.int64)
        rows = rows if len(rows) else np.zeros(1, dtype=np.int64)
        blocks.append(AttributeReports(attribute, rows, {"value": rng.uniform(-2, 2, len(rows)),
                                                         "index": rng.integers(0, 9, (len(rows), 2)),
                                                         "bit": rng.integers(0, 2, len(rows)).astype(np.uint8)}))
    return encode(perturbed_batch(collection, version, rng.integers(0, 2**63, n, dtype=np.uint64),
                                  rng.integers(0, 2**41, n), tuple(blocks)))


VALID = st.integers(0, 2**32 - 1).map(envelope_bytes)
GOOD = envelope_bytes(0)


def result_or_none(fn: Callable[..., T], *args: object) -> T | None:
    """fn(*args), or None if it raises WireError (anything else fails the test)."""
    try:
        return fn(*args)
    except WireError:
        return None


@FUZZ
@given(untrusted(VALID))
def test_decode_returns_a_batch_or_raises_wire_error(data: bytes) -> None:
    batch = result_or_none(decode, data)
    if batch is not None:
        n = len(batch)
        assert n >= 1 and batch.devices.dtype == np.dtype("<u8") and batch.timestamps_ms.shape == (n,)
        for block in batch.attributes:
            assert len(block.rows) and (np.diff(block.rows) > 0).all() and block.rows[-1] < n


@FUZZ
@given(untrusted(VALID))
def test_each_step_returns_a_valid_object_or_raises_wire_error(data: bytes) -> None:
    version = leading_version(data)
    assert version is None or (isinstance(version, int) and not isinstance(version, bool))
    env = result_or_none(decode_envelope, data)
    if env is None:
        return
    assert isinstance(env, Envelope) and env.version == WIRE_VERSION
    n = result_or_none(check_envelope, env)
    if n is None:
        return
    assert n >= 1
    pair = [decode_envelope(GOOD), env]
    joined = result_or_none(concatenate, pair)
    if joined is not None:
        assert len(joined.devices) == len(joined.timestamps_ms) == int(joined.sizes.sum())
        assert set(joined.messages.tolist()) | set(joined.rejected) == {0, 1}
        if not joined.rejected:  # what the edge re-batches: the same message from the bytes as from the columns
            expected = envelope_of("fuzz", 1, joined.devices, joined.timestamps_ms, joined.attributes)
            assert encode_envelope(join_envelopes(pair)) == encode_envelope(expected)


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_a_string_with_invalid_utf8_is_a_wire_error_and_names_no_version(raw: bytes) -> None:
    """Regression: a msgpack array whose first string is not UTF-8 made `leading_version` raise UnicodeDecodeError
    (msgspec raises it, not a msgspec error), which crashed the worker's agent on every restart."""
    bad = msgspec.Raw(bytes([0xA0 | len(raw)]) + raw)
    collection_not_utf8 = msgspec.msgpack.encode([1, bad, 1, b"\0" * 8, b"\0" * 8, []])
    assert leading_version(collection_not_utf8) == 1
    for decoder in (decode_envelope, decode):
        with pytest.raises(WireError, match="malformed envelope: UnicodeDecodeError"):
            decoder(collection_not_utf8)
    leading_string = msgspec.msgpack.encode([bad, "fuzz", 1, b"", b"", []])
    assert leading_version(leading_string) is None
    with pytest.raises(WireError, match="malformed envelope"):
        decode(leading_string)
    newer = msgspec.msgpack.encode([2, bad])
    assert leading_version(newer) == 2
    with pytest.raises(WireError):
        decode(newer)


@pytest.mark.parametrize("data", [b"", b"\x91" * 100_000 + b"\x01", b"\xdd\xff\xff\xff\xff", None, "text", 3])
def test_empty_deep_promising_and_non_bytes_inputs_are_wire_errors(data: object) -> None:
    assert leading_version(data) is None  # type: ignore[arg-type]
    with pytest.raises(WireError):
        decode(data)  # type: ignore[arg-type]
