"""The micro-batch processor: decode, validate, dedupe, accumulate (pure; no Kafka, no Redis)."""

from __future__ import annotations

from dataclasses import dataclass
from unittest.mock import ANY

import msgspec
import numpy as np
import pytest

from ldpstream.aggregator.dedupe import SeenDevices
from ldpstream.aggregator.processing import (
    DUPLICATE,
    FUTURE,
    MALFORMED,
    OUT_OF_RANGE,
    STALE,
    UNKNOWN_COLLECTION,
    UNKNOWN_VERSION,
    WRONG_PARTITION,
    WRONG_SHAPE,
    DeadLetter,
    Message,
    PartitionProcessor,
)
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import CollectionSpec, parse_spec
from ldpstream.contract.validation import clock_skew_ms
from ldpstream.contract.wire import AttributeReports, encode, perturbed_batch
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Mechanism, ReportSchema

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
    return PartitionProcessor(lambda name, version, _: PLAN if (name, version) == ("unit", 1) else None, lambda: NOW)


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


@pytest.mark.parametrize(("skew_s", "ttl_s"), [(300, 7500), (25 * 3600, 7200 + 25 * 3600)])
def test_a_set_clock_skew_takes_reports_that_far_ahead_and_keeps_their_dedupe_lists_longer(skew_s: int,
                                                                                         ttl_s: int) -> None:
    """A report 2 hours ahead is a dead letter under the default 5 minutes, counted under 25 hours; the dedupe
    list's TTL is two window lengths plus the skew (a report of that window can come until then)."""
    proc = PartitionProcessor(lambda name, version, _: PLAN, lambda: NOW, clock_skew_ms(skew_s))
    result = proc.process(TOPIC, [message([1, 2], 1, ts=NOW + 2 * 3_600_000), message([3, 4], 2)])
    assert [d.reason for d in result.dead_letters] == ([FUTURE] if skew_s == 300 else [])
    assert result.update is not None
    assert {w.dedupe_ttl_s for w in result.update.windows if w.window == "1h"} == {ttl_s}


@pytest.mark.parametrize("bad", ["-1", "nan", "one", str(8 * 86400), "inf"])
def test_a_clock_skew_outside_its_range_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="clock skew"):
        clock_skew_ms(bad)


def test_duplicates_within_a_batch_and_against_what_the_partition_counted() -> None:
    proc, store = processor(), MemoryStore()
    seen = SeenDevices(store)
    first = proc.process(TOPIC, [message([1, 2, 3], 0), message([3, 9], 1, seed=1)], seen)
    assert [(d.offset, d.reason, d.rows) for d in first.dead_letters] == [(1, DUPLICATE, (0,))]
    assert first.update is not None and [r.expected for r in first.update.ranges] == [-1]
    assert store.apply(first.update).status == "applied"
    seen.commit(TOPIC, first.update, NOW)
    second = proc.process(TOPIC, [message([2, 10], 2, seed=2)], seen)
    assert [(d.reason, d.rows) for d in second.dead_letters] == [(DUPLICATE, (0,))]
    assert second.update is not None and [r.expected for r in second.update.ranges] == [1]
    assert store.apply(second.update).status == "applied"
    assert store.outcomes("unit") == {"accepted": 5, f"rejected:{DUPLICATE}": 2}
    # another hour is another dedupe window
    later = proc.process(TOPIC, [message([2], 3, ts=NOW - 3_600_000)], seen)
    assert later.dead_letters == []


def test_reports_off_their_devices_partition_are_rejected() -> None:
    spec8 = parse_spec(SPEC.canonical_json().replace('"partitions":1', '"partitions":8'))
    plan8 = Plan(spec8, PLAN.mechanisms)
    proc = PartitionProcessor(lambda name, version, _: plan8, lambda: NOW)
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


def numeric_message(offset: int, devices: list[int], rows: list[int], values: int | None = None) -> Message:
    """Every device reports the numeric attribute at `rows` (any rows, any number of values: to break them)."""
    rng = np.random.default_rng(offset)
    reports = PLAN.mechanisms[0].perturb(rng.uniform(-1, 1, len(rows) if values is None else values), rng)
    batch = perturbed_batch("unit", 1, np.asarray(devices, dtype=np.uint64), np.full(len(devices), NOW, dtype=np.int64),
                            (AttributeReports(0, np.asarray(rows), reports),))
    return Message(offset, encode(batch))


def test_messages_with_malformed_rows_are_rejected_whole_and_change_nothing_else() -> None:
    good = [message([1, 2, 3, 4], 10), numeric_message(12, [5], [0]), message([6, 7, 1], 14, seed=2)]
    bad = [numeric_message(11, [101, 102], [1, 0]),  # rows out of order
           numeric_message(13, [103, 104], [0, 2]),  # a row >= n: it would be the next message's first device
           numeric_message(15, [105, 106], [0, 1], values=1)]  # a column too short for its rows
    alone = processor().process(TOPIC, good)
    mixed = processor().process(TOPIC, [good[0], bad[0], good[1], bad[1], good[2], bad[2]])
    assert alone.dead_letters == [DeadLetter(14, good[2].value, DUPLICATE, ANY, (2,))]  # device 1 again
    letters = sorted(mixed.dead_letters, key=lambda d: d.offset)
    assert [(d.offset, d.reason, d.rows, d.value) for d in letters] == [
        (11, MALFORMED, None, bad[0].value), (13, MALFORMED, None, bad[1].value),
        (14, DUPLICATE, (2,), good[2].value), (15, WRONG_SHAPE, None, bad[2].value)]
    rows_problem = "attribute 0: rows must be strictly increasing and < 2"
    assert [d.detail for d in letters if d.reason != DUPLICATE] == [
        rows_problem, rows_problem, "attribute 0: column 'value' has 1 values for 2 rows of width 1"]
    assert alone.update is not None and mixed.update is not None
    assert alone.update.outcomes == {"accepted": 7, f"rejected:{DUPLICATE}": 1}
    assert mixed.update.outcomes == {**alone.update.outcomes, f"rejected:{MALFORMED}": 2, f"rejected:{WRONG_SHAPE}": 1}
    assert mixed.update.newest_report_ms == alone.update.newest_report_ms
    assert len(mixed.update.windows) == len(alone.update.windows) == 2
    for got, expected in zip(mixed.update.windows, alone.update.windows, strict=True):
        assert (got.window, got.start_ms, got.devices) == (expected.window, expected.start_ms, expected.devices)
        assert got.stats.keys() == expected.stats.keys()
        for attr, stats in expected.stats.items():
            np.testing.assert_array_equal(got.stats[attr], stats)
        assert (got.dedupe or {}).keys() == (expected.dedupe or {}).keys()
        for part, devices in (expected.dedupe or {}).items():
            np.testing.assert_array_equal(got.dedupe[part], devices)  # type: ignore[index]


def test_a_spec_version_whose_messages_are_all_malformed_adds_nothing() -> None:
    result = processor().process(TOPIC, [numeric_message(1, [1, 2], [1, 1])])
    assert [(d.reason, d.rows) for d in result.dead_letters] == [(MALFORMED, None)]
    assert result.update is not None
    assert result.update.outcomes == {f"rejected:{MALFORMED}": 1} and result.update.windows == ()
