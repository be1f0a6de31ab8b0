"""The micro-batch processor: decode, validate, dedupe, accumulate (pure; no Kafka, no Redis)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import pytest

from aggregator.dedupe import SeenDevices
from aggregator.processing import (
    DUPLICATE,
    FUTURE,
    MALFORMED,
    OUT_OF_RANGE,
    STALE,
    UNKNOWN_COLLECTION,
    UNKNOWN_VERSION,
    WRONG_PARTITION,
    WRONG_SHAPE,
    Message,
    PartitionProcessor,
)
from aggregator.store import MemoryStore
from ldp import registry
from ldp.base import Mechanism, ReportSchema
from producer.spec import CollectionSpec, parse_spec
from producer.wire import AttributeReports, encode, perturbed_batch

NOW = 1_800_000_000_000
SPEC = parse_spec("""
name: unit
version: 1
epsilon: 2
sampling: 1
windows: [1h]
partitions: 1
attributes:
  - {name: battery, type: numeric, range: [0, 100], mechanism: pm}
  - {name: mode, type: categorical, values: [a, b, c], mechanism: grr}
""")
TOPIC = "ldp.reports.unit"


@dataclass
class Plan:
    spec: CollectionSpec
    mechanisms: tuple[Mechanism, ...]
    attributes_per_device: int = 1

    @property
    def schemas(self) -> tuple[ReportSchema, ...]:
        return tuple(m.schema for m in self.mechanisms)


PLAN = Plan(SPEC, (registry.make("pm", 2.0), registry.make("grr", 2.0, domain=3)))


def processor() -> PartitionProcessor:
    return PartitionProcessor(lambda name, version: PLAN if (name, version) == ("unit", 1) else None, lambda: NOW)


def message(devices: list[int], offset: int, seed: int = 0, ts: int = NOW, collection: str = "unit",
            version: int = 1, partition: int = 0) -> Message:
    """Half the devices report the numeric attribute, half the categorical one (k = 1)."""
    rng = np.random.default_rng(seed)
    d = np.asarray(devices, dtype=np.uint64)
    rows = np.arange(len(d))
    num, cat = rows[::2], rows[1::2]
    blocks = (AttributeReports(0, num, PLAN.mechanisms[0].perturb(rng.uniform(-1, 1, len(num)), rng)),
              AttributeReports(1, cat, PLAN.mechanisms[1].perturb(rng.integers(0, 3, len(cat)), rng)))
    batch = perturbed_batch(collection, version, d, np.full(len(d), ts, dtype=np.int64), blocks)
    return Message(offset, encode(batch), partition=partition)


def test_good_messages_are_accumulated_per_window() -> None:
    result = processor().process(TOPIC, [message([1, 2, 3, 4], 10), message([5, 6], 11, seed=1)])
    assert result.dead_letters == []
    u = result.update
    assert u is not None and [(r.source, r.first, r.last) for r in u.ranges] == [(f"{TOPIC}:0", 10, 11)]
    assert u.outcomes == {"accepted": 6}
    by_window = {w.window: w for w in u.windows}
    assert set(by_window) == {"1h", "all"}
    assert by_window["1h"].start_ms == NOW // 3_600_000 * 3_600_000
    assert by_window["all"].devices == 6 and by_window["1h"].dedupe is not None
    assert by_window["all"].stats[0][0] == 3 and by_window["all"].stats[1].shape == (1 + PLAN.mechanisms[1].stats_size,)


def test_undecodable_messages_are_dead_letters_with_reasons() -> None:
    good = message([1, 2], 1)
    bad = [Message(2, b"\x00\x01garbage"), Message(3, good.value[:-7]),
           Message(4, msgspec.msgpack.encode([2, "unit", 1, b"", b"", []])),
           Message(5, message([7, 8], 0, collection="other").value),
           Message(6, message([7, 8], 0, version=9).value)]
    result = processor().process(TOPIC, [good, *bad])
    reasons = {d.offset: d.reason for d in result.dead_letters}
    assert reasons == {2: MALFORMED, 3: MALFORMED, 4: UNKNOWN_VERSION, 5: UNKNOWN_COLLECTION, 6: UNKNOWN_COLLECTION}
    assert all(d.rows is None for d in result.dead_letters)
    assert result.update is not None and result.update.outcomes["accepted"] == 2


def test_out_of_range_reports_are_rejected_per_device() -> None:
    rng = np.random.default_rng(0)
    pm = PLAN.mechanisms[0]
    reports = pm.perturb(rng.uniform(-1, 1, 3), rng)
    reports["value"] = reports["value"].copy()
    reports["value"][1] = 1e6  # outside [-C, C]
    batch = perturbed_batch("unit", 1, np.array([1, 2, 3], dtype=np.uint64), np.full(3, NOW, dtype=np.int64),
                            (AttributeReports(0, np.arange(3), reports),))
    result = processor().process(TOPIC, [Message(1, encode(batch))])
    assert [(d.reason, d.rows) for d in result.dead_letters] == [(OUT_OF_RANGE, (1,))]
    assert result.update is not None and result.update.outcomes == {"accepted": 2, f"rejected:{OUT_OF_RANGE}": 1}


def test_wrong_shapes_are_rejected() -> None:
    rng = np.random.default_rng(0)
    grr_reports = PLAN.mechanisms[1].perturb(np.array([0, 1]), rng)
    both = perturbed_batch("unit", 1, np.array([1, 2], dtype=np.uint64), np.full(2, NOW, dtype=np.int64),
                           (AttributeReports(0, np.array([0, 1]), PLAN.mechanisms[0].perturb(np.zeros(2), rng)),
                            AttributeReports(1, np.array([0, 1]), grr_reports)))
    wide = perturbed_batch("unit", 1, np.array([3], dtype=np.uint64), np.full(1, NOW, dtype=np.int64),
                           (AttributeReports(0, np.array([0]), {"value": np.zeros(2)}),))
    result = processor().process(TOPIC, [Message(1, encode(both)), Message(2, encode(wide))])
    assert sorted((d.offset, d.reason) for d in result.dead_letters) == [(1, WRONG_SHAPE), (2, WRONG_SHAPE)]


def test_report_times_are_checked() -> None:
    result = processor().process(TOPIC, [message([1, 2], 1, ts=NOW + 3_600_000),
                                            message([3, 4], 2, ts=NOW - 2 * 3_600_000)])
    assert sorted(d.reason for d in result.dead_letters) == [FUTURE, STALE]


def test_duplicates_within_a_batch_and_against_what_the_partition_counted() -> None:
    proc, store = processor(), MemoryStore()
    seen = SeenDevices(store)
    first = proc.process(TOPIC, [message([1, 2, 3], 1), message([3, 9], 2, seed=1)], seen)
    assert [(d.offset, d.reason, d.rows) for d in first.dead_letters] == [(2, DUPLICATE, (0,))]
    assert first.update is not None and [r.expected for r in first.update.ranges] == [-1]
    assert store.apply(first.update).status == "applied"
    seen.commit(TOPIC, first.update, NOW)
    second = proc.process(TOPIC, [message([2, 10], 3, seed=2)], seen)
    assert [(d.reason, d.rows) for d in second.dead_letters] == [(DUPLICATE, (0,))]
    assert second.update is not None and [r.expected for r in second.update.ranges] == [2]
    assert store.apply(second.update).status == "applied"
    assert store.outcomes("unit") == {"accepted": 5, f"rejected:{DUPLICATE}": 2}
    # another hour is another dedupe window
    later = proc.process(TOPIC, [message([2], 4, ts=NOW - 3_600_000)], seen)
    assert later.dead_letters == []


def test_reports_off_their_devices_partition_are_rejected() -> None:
    spec8 = parse_spec(SPEC.model_dump_json().replace('"partitions":1', '"partitions":8'))
    plan8 = Plan(spec8, PLAN.mechanisms)
    proc = PartitionProcessor(lambda name, version: plan8, lambda: NOW)
    devices = [8, 3, 16, 11, 24]  # partitions 0, 3, 0, 3, 0
    result = proc.process(TOPIC, [message(devices, 1, partition=0), message(devices, 2, partition=3)])
    letters = sorted((d.offset, d.reason, d.rows) for d in result.dead_letters)
    assert letters == [(1, WRONG_PARTITION, (1, 3)), (2, WRONG_PARTITION, (0, 2, 4))]
    assert result.update is not None and result.update.outcomes["accepted"] == 5
    hour = next(w for w in result.update.windows if w.window == "1h")
    assert {p: d.tolist() for p, d in (hour.dedupe or {}).items()} == {0: [8, 16, 24], 3: [3, 11]}


@pytest.mark.parametrize("n", [1, 1000])
def test_statistics_equal_the_mechanisms_own(n: int) -> None:
    msg = message(list(range(1, n + 1)), 1, seed=3)
    result = processor().process(TOPIC, [msg])
    rng = np.random.default_rng(3)
    values = rng.uniform(-1, 1, len(range(0, n, 2)))
    expected = PLAN.mechanisms[0].accumulate(PLAN.mechanisms[0].perturb(values, rng))
    all_time = next(w for w in result.update.windows if w.window == "all")  # type: ignore[union-attr]
    np.testing.assert_allclose(all_time.stats[0], [len(values), *expected])
