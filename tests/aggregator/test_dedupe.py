"""The worker's in-memory dedupe lists: loaded at an offset, refused when stale, reloaded, and kept in step."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from test_processing import NOW, TOPIC, message, processor

import ldpstream.aggregator.dedupe
from ldpstream.aggregator.dedupe import CONFLICT, DeviceSet, SeenDevices
from ldpstream.aggregator.processing import DUPLICATE, PartitionProcessor
from ldpstream.aggregator.store import BatchUpdate, MemoryStore, OffsetRange, WindowIncrement

HOUR = (1, "1h", NOW // 3_600_000 * 3_600_000)


def test_doctests() -> None:
    result = doctest.testmod(ldpstream.aggregator.dedupe)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("seed", range(5))
def test_the_device_set_equals_a_python_set(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Across many additions and growths (moved a few slots at a time, so lookups meet both tables), with colliding
    ids (equal low or high bits) and the ids 0 and 2^64 - 1."""
    monkeypatch.setattr(ldpstream.aggregator.dedupe, "MIGRATE_SLOTS", 64)
    rng = np.random.default_rng(seed)
    moving = 0
    seen, truth = DeviceSet(), set[int]()
    crowded = (np.arange(1, 400, dtype=np.uint64) << np.uint64(40)) | np.uint64(seed)  # equal low bits
    for size in rng.integers(0, 3000, 60):
        drawn = np.concatenate([rng.integers(0, 2**64, int(size), dtype=np.uint64), rng.choice(crowded, 5),
                                np.array([0, 2**64 - 1, 1], dtype=np.uint64)[: rng.integers(0, 4)]])
        drawn = np.unique(drawn)
        new = drawn[[v not in truth for v in drawn.tolist()]]
        probe = np.concatenate([drawn, rng.integers(0, 2**64, 200, dtype=np.uint64)])
        assert seen.contains(probe).tolist() == [v in truth for v in probe.tolist()]
        seen.add(new)
        truth.update(new.tolist())
        assert len(seen) == len(truth) and 2 * len(seen) <= len(seen.table.slots)  # never more than half full
        moving += seen.old is not None
    assert moving > 0  # some lookups ran while a growth was being moved
    assert seen.values().tolist() == sorted(truth)
    assert DeviceSet(seen.values()).values().tolist() == sorted(truth)


def devices(seen: SeenDevices, key: tuple[int, str, int]) -> list[int]:
    return seen.devices(TOPIC, 0, key).values().tolist()


def run(proc: PartitionProcessor, store: MemoryStore, seen: SeenDevices, devices: list[int], offset: int,
        seed: int = 0) -> tuple[str, list[str]]:
    """One worker round: process, apply, and commit or invalidate as the worker does."""
    result = proc.process(TOPIC, [message(devices, offset, seed=seed)], seen)
    assert result.update is not None
    outcome = store.apply(result.update)
    if outcome.status == "applied":
        seen.commit(TOPIC, result.update, NOW)
    else:
        seen.invalidate(TOPIC, [0])
    return outcome.status, [d.reason for d in result.dead_letters]


def test_a_worker_whose_lists_are_stale_is_refused_then_catches_the_duplicate() -> None:
    store, proc = MemoryStore(), processor()
    a, b = SeenDevices(store), SeenDevices(store)  # two workers; the partition moved from a to b and back
    assert run(proc, store, a, [1, 2], 0) == ("applied", [])
    assert run(proc, store, b, [3, 4], 1) == ("applied", [])
    assert run(proc, store, a, [4, 5], 2) == ("stale", [])  # a's lists lack b's devices: nothing written
    assert run(proc, store, a, [4, 5], 2, seed=1) == ("applied", [DUPLICATE])  # reloaded: 4 is a duplicate
    assert store.outcomes("unit") == {"accepted": 5, f"rejected:{DUPLICATE}": 1}
    assert sorted(store.seen_devices("unit", f"{TOPIC}:0", 0, [HOUR])[1][HOUR].tolist()) == [1, 2, 3, 4, 5]


def test_lists_loaded_at_different_offsets_force_a_reload() -> None:
    store = MemoryStore()
    seen = SeenDevices(store)
    assert devices(seen, HOUR) == [] and seen.synced(TOPIC, 0) == -1
    windows = (WindowIncrement(1, "1h", HOUR[2] + 3_600_000, 1, {}, {0: np.array([7], dtype=np.uint64)}),)
    store.apply(BatchUpdate("unit", (OffsetRange(f"{TOPIC}:0", 0, 0),), windows, {}))
    assert devices(seen, (1, "1h", HOUR[2] + 3_600_000)) == [7]
    assert seen.synced(TOPIC, 0) == CONFLICT  # the hour list was read at -1, the next one at 0
    seen.invalidate(TOPIC)
    assert devices(seen, HOUR) == [] and seen.synced(TOPIC, 0) == 0


def test_commit_keeps_lists_in_step_and_drops_expired_windows() -> None:
    store = MemoryStore()
    seen = SeenDevices(store)
    seen.devices(TOPIC, 0, HOUR)
    seen.devices(TOPIC, 0, (1, "all", 0))
    windows = (WindowIncrement(1, "1h", HOUR[2], 2, {}, {0: np.array([9, 3], dtype=np.uint64)}),)
    update = BatchUpdate("unit", (OffsetRange(f"{TOPIC}:0", 0, 4, -1),), windows, {})
    seen.commit(TOPIC, update, NOW)
    assert devices(seen, HOUR) == [3, 9] and seen.synced(TOPIC, 0) == 4
    seen.commit(TOPIC, update, NOW)  # expected -1 no longer matches: the lists are not trusted any more
    assert seen.synced(TOPIC, 0) == CONFLICT
    seen.clear()
    seen.devices(TOPIC, 0, HOUR)
    seen.devices(TOPIC, 0, (1, "all", 0))
    seen.commit(TOPIC, BatchUpdate("unit", (), (), {}), HOUR[2] + 2 * 3_600_000 + 1)
    held = seen._partitions[(TOPIC, 0)].windows  # the hour is past its two hours; all-time stays
    assert list(held) == [(1, "all", 0)]


def test_processing_without_lists_dedupes_within_the_batch_only() -> None:
    result = processor().process(TOPIC, [message([1, 1, 2], 0)])
    assert [d.rows for d in result.dead_letters] == [(1,)]
    assert result.update is not None and [r.expected for r in result.update.ranges] == [None]


def test_the_store_is_read_once_per_partition_and_window() -> None:
    class Counting(MemoryStore):
        reads = 0

        def seen_devices(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            Counting.reads += 1
            return super().seen_devices(*args, **kwargs)

    store, proc = Counting(), processor()
    seen = SeenDevices(store)
    for offset in range(5):
        assert run(proc, store, seen, [10 + offset], offset)[0] == "applied"
    assert Counting.reads == 1
