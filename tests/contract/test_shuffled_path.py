"""The report path of a collection (`ldpstream.contract.shuffled.report_path`): what a shuffled collection changes
outside the shuffler, asked in one place."""

from __future__ import annotations

import numpy as np

from ldpstream.contract.shuffled import DIRECT, SHUFFLED, report_path, shuffled_names
from ldpstream.contract.spec import load_spec
from ldpstream.contract.wire import Envelope, decode_envelope, encode_envelope
from ldpstream.runtime.settings import PROJECT_ROOT

SHUFFLED_SPEC = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml")
DIRECT_SPEC = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")


def test_each_spec_takes_its_path() -> None:
    assert report_path(SHUFFLED_SPEC) is SHUFFLED and report_path(DIRECT_SPEC) is DIRECT
    assert shuffled_names([SHUFFLED_SPEC, DIRECT_SPEC]) == {SHUFFLED_SPEC.name}
    assert SHUFFLED.topics(SHUFFLED_SPEC) == (SHUFFLED_SPEC.raw_topic, SHUFFLED_SPEC.topic)
    assert DIRECT.topics(DIRECT_SPEC) == (DIRECT_SPEC.topic,)
    assert SHUFFLED.per_device is False and DIRECT.per_device is True


def test_the_paths_grace_and_summary() -> None:
    assert SHUFFLED_SPEC.shuffle is not None
    assert SHUFFLED.grace_s(SHUFFLED_SPEC) == SHUFFLED_SPEC.shuffle.grace_s
    assert DIRECT.grace_s(DIRECT_SPEC) == DIRECT_SPEC.grace_s
    assert SHUFFLED.summary(SHUFFLED_SPEC) == {"delta": SHUFFLED_SPEC.shuffle.delta,
                                               "min_batch": SHUFFLED_SPEC.shuffle.min_batch}
    assert DIRECT.summary(DIRECT_SPEC) is None


def test_a_shuffled_report_leaves_the_edge_with_no_device_and_its_window_as_its_time() -> None:
    devices = np.array([11, 12, 13], dtype="<u8").tobytes()
    times = np.array([1_000_123, 1_004_999, 2_000_001], dtype="<i8").tobytes()
    sent = Envelope(1, "c", 1, devices, times, [])
    starts = np.array([1_000_000, 1_000_000, 2_000_000], dtype=np.int64)
    out = decode_envelope(encode_envelope(SHUFFLED.outgoing(sent, starts)))
    assert out.devices == bytes(24) and np.frombuffer(out.timestamps, "<i8").tolist() == starts.tolist()
    assert DIRECT.outgoing(sent, starts) is sent
    partitions = {SHUFFLED.partition(SHUFFLED_SPEC, 0) for _ in range(200)}
    assert partitions <= set(range(SHUFFLED_SPEC.partitions)) and DIRECT.partition(DIRECT_SPEC, 3) == 3
