"""Pure parts of the edge: request signatures, bounded decompression, the spool's records."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from ldpstream.contract.auth import AuthError, authorization, device_key, parse_authorization, verify
from ldpstream.device.outbox import backoff_s
from ldpstream.edge.intake import Refusal, inflate
from ldpstream.edge.spool import Spool, SpoolFull, read_segment

KEY = device_key(b"m" * 32, "c", "d1")
PATH = "/v1/collections/c/reports"


def test_a_signature_verifies_only_for_its_key_method_path_time_and_body() -> None:
    signed = parse_authorization(authorization("d1", KEY, "POST", PATH, b"body", 1000))
    verify(KEY, signed, "POST", PATH, b"body", 1000)
    for key, method, path, body, now in ((device_key(b"m" * 32, "c", "d2"), "POST", PATH, b"body", 1000),
                                         (KEY, "PUT", PATH, b"body", 1000), (KEY, "POST", PATH + "x", b"body", 1000),
                                         (KEY, "POST", PATH, b"bodz", 1000), (KEY, "POST", PATH, b"body", 10**9)):
        with pytest.raises(AuthError):
            verify(key, signed, method, path, body, now)


@pytest.mark.parametrize("header", [None, "", "Bearer x", "LDP-HMAC-SHA256 device=a b,ts=1,sig=" + "0" * 64,
                                    "LDP-HMAC-SHA256 device=a,ts=-1,sig=" + "0" * 64])
def test_malformed_authorization_headers_are_refused(header: str | None) -> None:
    with pytest.raises(AuthError):
        parse_authorization(header)


def test_gzip_is_inflated_up_to_its_bound_and_a_bomb_is_refused() -> None:
    assert inflate(gzip.compress(b"a" * 100), "gzip", 100) == b"a" * 100
    for body, status in ((gzip.compress(b"a" * 101), 413), (gzip.compress(b"a" * 100)[:-4], 400), (b"xx", 400)):
        with pytest.raises(Refusal) as refused:
            inflate(body, "gzip", 100)
        assert refused.value.status == status
    with pytest.raises(Refusal):
        inflate(b"", "br", 100)


def test_the_spool_keeps_records_in_order_drops_a_torn_tail_and_refuses_beyond_its_limit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, limit_bytes=200)
    spool.append([("t", 0, b"a" * 10), ("t", 1, b"b" * 10)])
    spool.rotate()
    spool.append([("t", 2, b"c" * 10)])
    with pytest.raises(SpoolFull):
        spool.append([("t", 3, b"d" * 200)])
    first, second = sorted(tmp_path.glob("*.seg"))
    with open(second, "ab") as torn:
        torn.write(b"\x10\x00\x00\x00garbage")
    reopened = Spool(tmp_path, limit_bytes=200)
    assert [read_segment(s) for s in reopened.closed_segments()] == [[("t", 0, b"a" * 10), ("t", 1, b"b" * 10)],
                                                                     [("t", 2, b"c" * 10)]]
    reopened.remove(first)
    assert len(reopened.closed_segments()) == 1 and not reopened.empty


def test_backoff_is_jittered_below_its_cap_and_never_sooner_than_retry_after_up_to_the_cap() -> None:
    waits = [backoff_s(attempt, 0.0, 0.1, 2.0) for attempt in range(1, 12) for _ in range(50)]
    assert 0 <= min(waits) and max(waits) <= 2.0 and len(set(waits)) > 100
    assert all(backoff_s(attempt, 1.5, 0.1, 2.0) >= 1.5 for attempt in range(1, 12))
    assert all(backoff_s(attempt, 5.0, 0.1, 2.0) == 2.0 for attempt in range(1, 12))  # an absurd Retry-After: capped
