"""A device's outbox joins the reports it stored into one request body: a stored file damaged on disk (mutated
bytes, or anything) is a WireError, which the transport treats as a report the edge could never accept, never
another exception that would stop the device's flush."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ldpstream.contract.wire import WireError, check_envelope, decode_envelope
from ldpstream.device.outbox import joined_body
from tests.contract.test_wire_fuzz import FUZZ, GOOD, VALID
from tests.fuzzing import untrusted


@FUZZ
@given(st.lists(st.one_of(VALID, untrusted(VALID)), min_size=2, max_size=4))
def test_joining_stored_reports_gives_an_envelope_or_a_wire_error(stored: list[bytes]) -> None:
    try:
        body = joined_body([GOOD, *stored])
    except WireError:
        return
    env = decode_envelope(body)
    assert check_envelope(env) == sum(check_envelope(decode_envelope(m)) for m in [GOOD, *stored])


def _damaged(block_field: int, value: object) -> bytes:
    """GOOD with a field of its first attribute block replaced: 1 rows, 2 columns (a file damaged on disk that still
    decodes as an envelope)."""
    tree = msgspec.msgpack.decode(GOOD)
    tree[5][0][block_field] = value
    return msgspec.msgpack.encode(tree)


@pytest.mark.parametrize("stored", [
    _damaged(1, b"\x00" * 9),  # row numbers not whole uint32s
    _damaged(2, [["bit", "|u#", b"\x00"]]),  # a dtype the wire does not carry
])
def test_a_stored_report_damaged_but_decodable_is_a_wire_error(stored: bytes) -> None:
    decode_envelope(stored)  # it still decodes: only its lengths and dtypes tell
    with pytest.raises(WireError):
        joined_body([GOOD, stored])
