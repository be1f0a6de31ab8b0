"""The statistics store contract, run on both backends (Redis needs the running local Redis)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from ldpstream.aggregator.store import (
    NOT_APPLIED,
    BatchUpdate,
    MemoryStore,
    OffsetRange,
    RedisStore,
    StatsStore,
    WindowIncrement,
)
from ldpstream.runtime.settings import Settings

SIZES = {0: 3, 1: 4}


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[StatsStore, str]]:
    collection = f"test-{uuid.uuid4().hex[:10]}"
    if request.param == "memory":
        yield MemoryStore(), collection
        return
    cfg: Settings = request.getfixturevalue("live_services")
    s = RedisStore(cfg.redis)
    yield s, collection
    s.delete_collection(collection)


def update(collection: str, offset: int, devices: list[int], source: str = "t:0", start: int = 0,
           scale: float = 1.0, expected: int | None = None, first: int | None = None) -> BatchUpdate:
    """A batch of offsets `first` (default: `offset`) to `offset` of one partition."""
    d = np.asarray(devices, dtype=np.uint64)
    stats = {0: np.array([len(d), 0.5, 0.25]) * scale, 1: np.array([0.0, 1.0, 2.0, 3.0]) * scale}
    partition = int(source.rpartition(":")[2])
    return BatchUpdate(collection, (OffsetRange(source, offset if first is None else first, offset, expected),),
                       (WindowIncrement(1, "1h", start, len(d), stats, dedupe={partition: d}, dedupe_ttl_s=7200),
                        WindowIncrement(1, "all", 0, len(d), stats)),
                       {"accepted": len(d), "rejected:out_of_range": 2}, newest_report_ms=1000 + offset)


def test_apply_adds_and_records_the_offset(store: tuple[StatsStore, str]) -> None:
    s, c = store
    assert s.apply(update(c, 10, [1, 2, 3], first=0)).status == "applied"
    assert s.apply(update(c, 20, [4, 5], first=11)).status == "applied"
    w = s.read_window(c, 1, "all", 0, SIZES)
    assert w.devices == 5
    np.testing.assert_allclose(w.stats[0], [5, 1.0, 0.5])
    np.testing.assert_allclose(w.stats[1], [0, 2, 4, 6])
    assert s.offsets(c) == {"t:0": 20}
    assert s.outcomes(c) == {"accepted": 5, "rejected:out_of_range": 4}
    assert s.freshness(c)["newest_report_ms"] == 1020
    assert s.windows(c) == [(1, "1h", 0), (1, "all", 0)]


def test_a_replayed_batch_is_skipped_and_changes_nothing(store: tuple[StatsStore, str]) -> None:
    s, c = store
    s.apply(update(c, 10, [1, 2, 3], first=0))
    before = s.read_window(c, 1, "all", 0, SIZES)
    assert s.apply(update(c, 10, [7, 8])).status == "skipped"
    assert s.apply(update(c, 5, [9])).status == "skipped"
    after = s.read_window(c, 1, "all", 0, SIZES)
    assert after.devices == before.devices and s.outcomes(c)["accepted"] == 3


def test_a_batch_overlapping_the_applied_offset_writes_nothing(store: tuple[StatsStore, str]) -> None:
    s, c = store
    s.apply(update(c, 10, [1, 2, 3], first=0))
    overlapping = BatchUpdate(c, (OffsetRange("t:0", 10, 12),), update(c, 12, [4]).windows, {"accepted": 1})
    result = s.apply(overlapping)
    assert (result.status, result.applied) == ("overlap", {"t:0": 10})
    assert s.offsets(c) == {"t:0": 10} and s.outcomes(c)["accepted"] == 3


def test_one_write_covers_several_partitions_each_guarded(store: tuple[StatsStore, str]) -> None:
    s, c = store
    s.apply(update(c, 10, [1], source="t:0", first=0))
    windows = update(c, 0, [2, 3]).windows
    both = BatchUpdate(c, (OffsetRange("t:0", 11, 15), OffsetRange("t:1", 0, 4)), windows, {"accepted": 2})
    assert s.apply(both).status == "applied"
    assert s.offsets(c) == {"t:0": 15, "t:1": 4} and s.outcomes(c)["accepted"] == 3
    assert s.apply(both).status == "skipped"
    partly = BatchUpdate(c, (OffsetRange("t:0", 16, 20), OffsetRange("t:1", 3, 9)), windows, {"accepted": 2})
    result = s.apply(partly)
    assert (result.status, result.applied) == ("overlap", {"t:1": 4})
    assert s.offsets(c) == {"t:0": 15, "t:1": 4} and s.outcomes(c)["accepted"] == 3


def test_offsets_are_per_partition(store: tuple[StatsStore, str]) -> None:
    s, c = store
    assert s.apply(update(c, 10, [1], source="t:0", first=0)).status == "applied"
    assert s.apply(update(c, 3, [2], source="t:1", first=0)).status == "applied"
    assert s.offsets(c) == {"t:0": 10, "t:1": 3}


def test_dedupe_lists_are_read_with_the_offset_they_match(store: tuple[StatsStore, str]) -> None:
    s, c = store
    hour = (1, "1h", 0)
    assert s.seen_devices(c, "t:0", 0, [hour]) == (NOT_APPLIED, {hour: pytest.approx(np.zeros(0))})
    s.apply(update(c, 10, [5, 2**64 - 1, 256], first=0))
    s.apply(update(c, 11, [3]))
    s.apply(update(c, 4, [7], source="t:1", first=0))
    s.apply(update(c, 12, [9], start=3_600_000))
    applied, lists = s.seen_devices(c, "t:0", 0, [hour, (1, "1h", 3_600_000), (1, "1h", 7_200_000)])
    assert applied == 12
    assert lists[hour].dtype == np.uint64 and lists[hour].tolist() == [5, 2**64 - 1, 256, 3]  # in counted order
    assert lists[(1, "1h", 3_600_000)].tolist() == [9] and lists[(1, "1h", 7_200_000)].tolist() == []
    assert s.seen_devices(c, "t:1", 1, [hour]) == (4, {hour: pytest.approx(np.array([7.0]))})


def test_a_write_deduplicated_at_another_offset_is_stale(store: tuple[StatsStore, str]) -> None:
    s, c = store
    assert s.apply(update(c, 10, [1, 2], expected=NOT_APPLIED, first=0)).status == "applied"
    stale = s.apply(update(c, 11, [2, 3], expected=NOT_APPLIED))  # another worker applied offset 10 meanwhile
    assert (stale.status, stale.applied) == ("stale", {"t:0": 10})
    assert s.outcomes(c)["accepted"] == 2 and s.seen_devices(c, "t:0", 0, [(1, "1h", 0)])[1][(1, "1h", 0)].size == 2
    assert s.apply(update(c, 11, [3], expected=10)).status == "applied"
    assert s.apply(update(c, 11, [3], expected=3)).status == "skipped"  # a replay is skipped whatever it expected
    overlap = s.apply(BatchUpdate(c, (OffsetRange("t:0", 11, 13, 3),), update(c, 0, [4]).windows, {"accepted": 1}))
    assert (overlap.status, overlap.applied) == ("overlap", {"t:0": 11})


def test_a_batch_beyond_the_applied_offset_is_a_gap_and_writes_nothing(store: tuple[StatsStore, str]) -> None:
    s, c = store
    assert s.apply(update(c, 10, [1, 2], first=0)).status == "applied"
    gap = s.apply(update(c, 20, [3], first=15, expected=14))  # 11-14 never applied: the store went back in time
    assert (gap.status, gap.applied) == ("gap", {"t:0": 10})
    never = s.apply(update(c, 7, [4], source="t:1", first=5))  # nothing applied from t:1: it must start at 0
    assert (never.status, never.applied) == ("gap", {"t:1": NOT_APPLIED})
    assert s.offsets(c) == {"t:0": 10} and s.outcomes(c)["accepted"] == 2
    assert s.read_window(c, 1, "all", 0, SIZES).devices == 2
    assert s.apply(update(c, 20, [3], first=11)).status == "applied"  # read again from applied + 1


def test_a_gap_in_one_partition_refuses_the_whole_write(store: tuple[StatsStore, str]) -> None:
    s, c = store
    s.apply(update(c, 10, [1], source="t:0", first=0))
    s.apply(update(c, 4, [2], source="t:1", first=0))
    windows = update(c, 0, [3, 4]).windows
    one_gap = BatchUpdate(c, (OffsetRange("t:0", 11, 12), OffsetRange("t:1", 9, 9)), windows, {"accepted": 2})
    assert (s.apply(one_gap).status, s.apply(one_gap).applied) == ("gap", {"t:1": 4})
    both = BatchUpdate(c, (OffsetRange("t:0", 8, 12), OffsetRange("t:1", 9, 9)), windows, {"accepted": 2})
    assert (s.apply(both).status, s.apply(both).applied) == ("overlap", {"t:0": 10})  # dropped first, then the gap
    assert s.offsets(c) == {"t:0": 10, "t:1": 4} and s.outcomes(c)["accepted"] == 2
    fixed = BatchUpdate(c, (OffsetRange("t:0", 11, 12), OffsetRange("t:1", 5, 9)), windows, {"accepted": 2})
    assert s.apply(fixed).status == "applied" and s.offsets(c) == {"t:0": 12, "t:1": 9}


def test_messages_kafka_no_longer_has_are_skipped_once(store: tuple[StatsStore, str]) -> None:
    s, c = store
    assert s.skip_lost(c, "t:0", NOT_APPLIED, 50)  # retention deleted 0-49 before anything was applied
    assert s.offsets(c) == {"t:0": 49}
    assert not s.skip_lost(c, "t:0", NOT_APPLIED, 50)  # another reader saw it first: nothing moves
    assert s.apply(update(c, 60, [1], first=50)).status == "applied"
    assert not s.skip_lost(c, "t:0", 49, 70) and s.offsets(c) == {"t:0": 60}
    assert s.apply(update(c, 80, [2], first=75)).status == "gap"
    assert s.skip_lost(c, "t:0", 60, 75) and s.apply(update(c, 80, [2], first=75)).status == "applied"
    assert s.outcomes(c)["accepted"] == 2


def test_reading_an_unknown_window_gives_zeros(store: tuple[StatsStore, str]) -> None:
    s, c = store
    w = s.read_window(c, 1, "1h", 123, SIZES)
    assert w.devices == 0 and all(not v.any() for v in w.stats.values())


def test_reading_many_windows_is_reading_each(store: tuple[StatsStore, str]) -> None:
    s, c = store
    for i in range(5):
        s.apply(update(c, i, [i + 1], start=3_600_000 * i, scale=i + 1.0))
    starts = [3_600_000 * i for i in (4, 0, 2, 7)]  # in any order, one without data
    for sizes in (SIZES, {1: SIZES[1]}):  # every attribute, or one
        many = s.read_windows(c, 1, "1h", starts, sizes)
        for got, start in zip(many, starts, strict=True):
            one = s.read_window(c, 1, "1h", start, sizes)
            assert got.devices == one.devices and got.stats.keys() == one.stats.keys() == sizes.keys()
            for attr, vector in one.stats.items():
                np.testing.assert_array_equal(got.stats[attr], vector)
    assert [w.devices for w in s.read_windows(c, 1, "1h", starts, SIZES)] == [1, 1, 1, 0]


def test_large_dedupe_lists_round_trip(store: tuple[StatsStore, str]) -> None:
    s, c = store
    devices = np.random.default_rng(0).integers(0, 2**64, 200_000, dtype=np.uint64)
    assert s.apply(update(c, 0, devices.tolist())).status == "applied"
    _, lists = s.seen_devices(c, "t:0", 0, [(1, "1h", 0)])
    np.testing.assert_array_equal(lists[(1, "1h", 0)], devices)


def test_one_auditor_claims_a_window_until_the_claim_expires(store: tuple[StatsStore, str]) -> None:
    s, c = store
    key = (1, "1h", 3_600_000)
    assert s.claim_audit(c, key, "a", 1)
    assert not s.claim_audit(c, key, "b", 1)  # another auditor: the window is taken
    assert s.claim_audit(c, (1, "1h", 7_200_000), "b", 1)  # another window is not
    time.sleep(1.1)
    assert s.claim_audit(c, key, "b", 1)  # an auditor that died frees the window when its claim expires


def test_an_acceptance_is_kept_and_replaced(store: tuple[StatsStore, str]) -> None:
    """`ldp poisoning accept`'s record: one per member, the later one replacing the earlier, gone with the
    collection's other keys."""
    s, c = store
    assert s.acceptances(c) == {}
    s.put_acceptance(c, "v1:1h:a0", b'{"from_ms": 0, "accepted_ms": 1}')
    s.put_acceptance(c, "v1:1h:a0", b'{"from_ms": 3600000, "accepted_ms": 2}')
    s.put_acceptance(c, "v1:1h:a1", b'{"from_ms": 0, "accepted_ms": 3}')
    assert s.acceptances(c) == {"v1:1h:a0": b'{"from_ms": 3600000, "accepted_ms": 2}',
                                "v1:1h:a1": b'{"from_ms": 0, "accepted_ms": 3}'}
