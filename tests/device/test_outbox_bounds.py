"""The outbox's bounds (count, bytes, age) and how a flush batches what it holds (one spec version a request; a
damaged file dropped alone)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ldpstream.contract.auth import Credential
from ldpstream.contract.wire import AttributeReports, decode, encode, perturbed_batch
from ldpstream.device.outbox import HttpTransport, Outbox, same_version


def report(version: int = 1, device: int = 1) -> bytes:
    column = {"value": np.array([0.5])}
    return encode(perturbed_batch("diag", version, np.array([device], dtype=np.uint64),
                                  np.array([1_795_788_000_000], dtype=np.int64),
                                  (AttributeReports(0, np.array([0], dtype=np.uint32), column),)))


def test_the_oldest_reports_go_beyond_the_count_and_byte_bounds(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "a", max_reports=5)
    for i in range(8):
        outbox.add(report(device=i))
    assert len(outbox) == 5 and outbox.dropped == 3
    assert [decode(p.read_bytes()).devices.tolist() for p in outbox.pending()] == [[i] for i in range(3, 8)]
    size = len(report())
    small = Outbox(tmp_path / "b", max_bytes=3 * size)
    for i in range(6):
        small.add(report(device=i))
    assert len(small) == 3 and small.dropped == 3


def test_reports_older_than_the_edge_takes_are_dropped_before_a_flush(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path, max_age_s=3600)
    old, new = outbox.add(report(device=1)), outbox.add(report(device=2))
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert outbox.drop_stale() == 1 and outbox.pending() == [new]


def test_a_request_carries_one_spec_version_and_a_damaged_file_goes_alone(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    for version in (1, 1, 2, 1):
        outbox.add(report(version))
    files, body = same_version(outbox.pending())
    assert len(files) == 2 and decode(body).spec_version == 1 and len(decode(body)) == 2
    outbox.pending()[1].write_bytes(b"\x00damaged")
    files, body = same_version(outbox.pending())
    assert len(files) == 1  # the good one before it; the damaged one is dropped on its own next


def test_a_flush_sends_version_by_version_and_drops_what_can_never_be_accepted(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path)
    for version in (1, 1, 2):
        outbox.add(report(version))
    outbox.add(b"\x00damaged")
    transport = HttpTransport("http://127.0.0.1:9", Credential("diag", "d1", bytes(32)), outbox, attempts=1)
    sent: list[int] = []
    transport._send = lambda body, n, deadline: (  # type: ignore[method-assign]
        sent.append(decode(body).spec_version), ["admitted"] * n)[1]
    assert transport.flush() == 3 and sent == [1, 2] and len(outbox) == 0
    assert transport.stats() == {"delivered": {"admitted": 3}, "dropped": {"damaged": 1}, "pending": 0}
