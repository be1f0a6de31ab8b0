"""The poisoning audit of a closed window: its reports read again from Kafka, every detector run on them, the record
kept in the store beside the live statistics and the reports it sets aside kept in `ldp.setaside`.

The sums the worker keeps cannot carry the tests of individual reports (which reports support a suspected itemset,
which numeric reports sit where honest ones cannot), so once a window has closed and its late reports are in, the
audit (`ldp poisoning audit`, or `--follow` for every window that closes):
1. reads the partitions of the collection's report topic from the offset of the window's start (less the allowed
   clock skew) to the offset of its end plus the dedupe window's lateness (`offsets_for_times`), or to the end;
2. keeps the reports the worker counted (`collect`): the spec version's well-formed rows in range, timed in the
   window, and, where a device reports once per window, its first report per dedupe window in partition order (a
   device's reports all go to one partition). Rows the worker refused as stale or from the future at the time are
   counted here if their time is in the window: the audit's n can exceed the live one by those;
3. runs each attribute's defence (`ldpstream.mechanisms.poisoning.attribute.defend`) with the reports, against the
   reference of the window's earlier windows, defended, and with the sequential test's sums after the window before
   (`ldpstream.aggregator.poisoning.chain`); the record keeps the sums after this one;
4. sends the reports its per-report tests set aside to the set-aside topic (the original message with the rows and
   the detector in headers, as dead letters are kept) and waits until Kafka has them, then writes the record
   (`encode_record`) with one Redis command: the statistics are never touched, so the live estimate and the
   worker's exactly-once accounting stay as they were. Run twice, an audit writes the same record again and the
   set-aside reports again (a reader keys them by source partition, offset and rows).
The audit holds a window's reports in memory (as on the wire: a UE report is d bytes): MAX_AUDIT_REPORTS at most.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, TopicPartition

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import DEFAULT_POLICY, acceptances, audit_records, chain, encode_record
from ldpstream.aggregator.store import ALL_TIME, StatsStore, WindowKey, WindowStats
from ldpstream.contract.clock import now_ms
from ldpstream.contract.shuffled import report_path
from ldpstream.contract.spec import window_seconds
from ldpstream.contract.topics import SETASIDE_TOPIC
from ldpstream.contract.validation import (
    MAX_FUTURE_SKEW_MS,
    dedupe_window,
    max_age_ms,
    row_problems,
    shape_problem,
    shaped,
    window_starts,
)
from ldpstream.contract.wire import AttributeColumns, Envelope, WireError, check_envelope, concatenate, decode_envelope
from ldpstream.mechanisms.base import Mechanism, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.poisoning.attribute import PER_REPORT, Defence, Drift, defend
from ldpstream.mechanisms.poisoning.base import Policy
from ldpstream.mechanisms.poisoning.frequency import supports_itemsets_apply
from ldpstream.runtime.access import READER_GROUP
from ldpstream.runtime.dlq import DeadLetter, DeadLetterProducer, Message
from ldpstream.runtime.kafka import consumer_client, topic_partitions

log = logging.getLogger(__name__)

MAX_AUDIT_REPORTS = 20_000_000
SUSPECTED_POISONING = "suspected_poisoning"  # the reason of a set-aside report
POLL_S = 0.5


class AuditError(RuntimeError):
    """A window that cannot be audited (not closed yet, too large, Kafka unreadable)."""


@dataclass(frozen=True)
class WindowReports:
    """The reports of a window the worker counted: the messages they came in and, per attribute index, the rows
    (message index, row in its message) and the mechanism's report columns of those rows."""

    messages: list[Message]
    reports: int
    attributes: dict[int, tuple[np.ndarray, np.ndarray, Reports]]


def collect(plan: Plan, messages: Sequence[Message], window: str, start_ms: int) -> WindowReports:
    """Step 2 of the module docstring, over messages of the collection's report topic in partition and offset
    order (anything that does not decode is what the worker dead-lettered: left out)."""
    spec = plan.spec
    kept: list[tuple[Message, Envelope]] = []
    for msg in messages:
        try:
            env = decode_envelope(msg.value)
            check_envelope(env)
        except WireError:
            continue
        if env.collection == spec.name and env.spec_version == spec.version and not shape_problem(env, plan.schemas):
            kept.append((msg, env))
    if not kept:
        return WindowReports([], 0, {})
    joined = concatenate([env for _, env in kept])
    message = np.repeat(joined.messages, joined.sizes)
    bases = np.cumsum(joined.sizes) - joined.sizes
    local = np.arange(len(joined.devices)) - np.repeat(bases, joined.sizes)
    columns = {a: AttributeColumns(c.rows, c.columns) for a, c in joined.attributes.items()}
    if all(_in_range(plan, a, c.columns) for a, c in columns.items()):  # the usual case: no row to look at
        counts = np.zeros(len(joined.devices), dtype=np.int64)
        for c in columns.values():
            counts[c.rows] += 1
        accepted = counts == plan.attributes_per_device
    else:
        problems = row_problems(spec, columns, plan.schemas, len(joined.devices), plan.attributes_per_device)
        accepted = ~problems.out_of_range & ~problems.wrong_count
    if window != ALL_TIME:
        accepted &= window_starts(window, joined.timestamps_ms) == start_ms
    if spec.one_report_per_window and report_path(spec).per_device:
        accepted &= _first_per_device(joined.devices, window_starts(dedupe_window(spec), joined.timestamps_ms),
                                      accepted)
    attributes: dict[int, tuple[np.ndarray, np.ndarray, Reports]] = {}
    for a, c in joined.attributes.items():
        take = accepted[c.rows]
        schema = plan.schemas[a]
        cols = shaped(c.columns, schema, len(c.rows))
        every = bool(take.all())  # the usual case: no copy of the columns
        rows = c.rows if every else c.rows[take]
        attributes[a] = (message[rows], local[rows],
                         {k: (v if every else v[take]).astype(schema.dtypes[k], copy=False) for k, v in cols.items()})
    return WindowReports([m for m, _ in kept], int(accepted.sum()), attributes)


def _in_range(plan: Plan, attribute: int, columns: dict[str, np.ndarray]) -> bool:
    """Whether every entry of an attribute's columns lies in its declared range and allowed set (one min and max
    per column; per-row checks only when this fails)."""
    for col in plan.schemas[attribute].columns:
        values = columns.get(col.name)
        if values is None or not values.size:
            continue
        if values.dtype.kind not in "iu" or col.allowed is not None:
            return False  # floats (NaN) and sets of allowed values: the per-row checks
        if values.min() < col.low or values.max() > col.high:
            return False
    return True


def _first_per_device(devices: np.ndarray, starts: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """Per row, whether it is its device's first accepted row of its dedupe window (rows in partition order)."""
    rows = np.flatnonzero(accepted)
    order = rows[np.lexsort((rows, starts[rows], devices[rows]))]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (devices[order][1:] != devices[order][:-1]) | (starts[order][1:] != starts[order][:-1])
    out = np.zeros(len(devices), dtype=bool)
    out[order[first]] = True
    return out


@dataclass(frozen=True)
class Audit:
    """The defences of a window's attributes and the dead letters of the reports set aside."""

    attributes: dict[int, Defence]
    set_aside: list[DeadLetter]
    reports: int
    reference_windows: int


def audit_reports(plan: Plan, live: WindowStats, reports: WindowReports, reference: WindowStats | None,
                  reference_windows: int = 0, policy: Policy = DEFAULT_POLICY,
                  drift: Mapping[int, Drift | None] | None = None,
                  blocks: Mapping[int, tuple[np.ndarray, ...] | None] | None = None) -> Audit:
    """Step 3 and the set-aside reports of step 4 (pure). The tests on sums, and the choice of the items the
    per-report tests examine, read the window's `live` statistics (the worker's; the audit does not add the
    reports up again); the per-report tests read the reports. `drift`: per attribute, the sequential test's sums
    after the window before (None: not run); `blocks`: per attribute, the block tests' sums of windows (the latest
    raw, the lagged defended: `ldpstream.mechanisms.poisoning.attribute.blocks_of`; None: not run)."""
    drift, blocks = drift or {}, blocks or {}
    defences: dict[int, Defence] = {}
    flagged_rows: dict[tuple[int, str], list[int]] = defaultdict(list)  # (message, detector) -> rows
    for j, mech in enumerate(plan.mechanisms):
        ref = None if reference is None else reference.stats.get(j)
        if j not in reports.attributes:
            defences[j] = defend(mech, live.stats[j], ref, policy=policy, drift=drift.get(j), blocks=blocks.get(j))
            continue
        msg_index, local, cols = reports.attributes[j]
        defence = defend(mech, live.stats[j], ref, reports=cols, policy=policy, drift=drift.get(j),
                         blocks=blocks.get(j))
        defences[j] = defence
        for f in defence.findings:
            if f.detector in PER_REPORT and f.flagged is not None:
                for m, row in zip(msg_index[f.flagged].tolist(), local[f.flagged].tolist(), strict=True):
                    flagged_rows[(m, f"{plan.spec.attributes[j].name}: {f.detector}")].append(row)
    letters = [DeadLetter(reports.messages[m].offset, reports.messages[m].value, SUSPECTED_POISONING, detail,
                          tuple(sorted(rows)), reports.messages[m].partition)
               for (m, detail), rows in sorted(flagged_rows.items())]
    return Audit(defences, letters, reports.reports, reference_windows)


def has_per_report_test(mech: Mechanism) -> bool:
    """Whether a mechanism's reports have a test of individual reports (UE, local hashing, numeric means)."""
    return (isinstance(mech, FrequencyOracle) and supports_itemsets_apply(mech)) or isinstance(mech, NumericMechanism)


# --- I/O -----------------------------------------------------------------------------------------------------------
def window_closed(plan: Plan, window: str, start_ms: int, now: int) -> bool:
    """Whether no report of the window can be counted any more: its end, the dedupe window's lateness and the
    allowed clock skew have passed."""
    if window == ALL_TIME:
        return False
    return start_ms + window_seconds(window) * 1000 + max_age_ms(plan.spec) + MAX_FUTURE_SKEW_MS <= now


def read_window(bootstrap: str, plan: Plan, window: str, start_ms: int, timeout_s: float = 120.0) -> list[Message]:
    """Step 1: the messages of every partition that can hold the window's reports (module docstring)."""
    topic = plan.spec.topic
    settings: dict[str, Any] = {"enable.partition.eof": True, "isolation.level": "read_committed"}
    consumer = consumer_client(bootstrap, READER_GROUP, **settings)
    try:
        partitions = range(topic_partitions(bootstrap, topic))
        if window == ALL_TIME:
            begin_ms, end_ms = 0, None
        else:
            begin_ms = max(0, start_ms - MAX_FUTURE_SKEW_MS)
            end_ms = start_ms + window_seconds(window) * 1000 + max_age_ms(plan.spec) + MAX_FUTURE_SKEW_MS
        ranges = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            first = _offset_at(consumer, topic, p, begin_ms, low, high, timeout_s)
            last = high if end_ms is None else _offset_at(consumer, topic, p, end_ms, low, high, timeout_s)
            if last > first:
                ranges[p] = (first, last)
        return list(_read(consumer, topic, ranges, timeout_s))
    finally:
        consumer.close()


def _offset_at(consumer: object, topic: str, partition: int, at_ms: int, low: int, high: int,
               timeout_s: float) -> int:
    """The first offset whose message time is >= at_ms (the partition's end if none)."""
    if at_ms <= 0:
        return low
    found = consumer.offsets_for_times([TopicPartition(topic, partition, at_ms)], timeout=timeout_s)  # type: ignore
    offset = found[0].offset
    return high if offset < 0 else max(low, offset)


def _read(consumer: object, topic: str, ranges: dict[int, tuple[int, int]], timeout_s: float) -> Iterator[Message]:
    """The messages in [first, last) of each partition, in offset order per partition (partition by partition)."""
    if not ranges:
        return
    consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in ranges.items()])  # type: ignore
    by_partition: dict[int, list[Message]] = defaultdict(list)
    pending = set(ranges)
    total = 0
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise AuditError(f"reading {topic} took more than {timeout_s:g} s")
        for msg in consumer.consume(num_messages=10_000, timeout=POLL_S):  # type: ignore
            error, p = msg.error(), msg.partition() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(p)
                    continue
                raise AuditError(f"reading {topic}: {error.str()}")
            offset = msg.offset() or 0
            if p not in pending:
                continue
            if offset >= ranges[p][1]:
                pending.discard(p)
                continue
            by_partition[p].append(Message(offset, msg.value() or b"", None, p))
            total += 1
            if offset >= ranges[p][1] - 1:
                pending.discard(p)
            if total > MAX_AUDIT_REPORTS:
                raise AuditError(f"the window holds more than {MAX_AUDIT_REPORTS} messages: too large to audit in "
                                 "memory")
    for p in sorted(by_partition):
        yield from by_partition[p]


def audit_window(bootstrap: str, store: StatsStore, plan: Plan, window: str, start_ms: int,
                 policy: Policy = DEFAULT_POLICY, setaside: DeadLetterProducer | None = None,
                 force: bool = False) -> Audit:
    """Audit one window (module docstring, steps 1-4); AuditError if it is still open (unless `force`)."""
    if not force and not window_closed(plan, window, start_ms, now_ms()):
        raise AuditError(f"{plan.spec.key} window {window}:{start_ms} is not closed yet (reports can still come)")
    if any(has_per_report_test(m) for m in plan.mechanisms):
        messages = read_window(bootstrap, plan, window, start_ms)
    else:  # every test this collection has reads the sums: nothing to read again
        messages = []
    reports = collect(plan, messages, window, start_ms)
    if reports.reports > MAX_AUDIT_REPORTS:
        raise AuditError(f"{reports.reports} reports: too many to audit in memory (at most {MAX_AUDIT_REPORTS})")
    live = store.read_window(plan.spec.name, plan.spec.version, window, start_ms, plan.sizes)
    before = chain(store, plan, window, start_ms, audit_records(store, plan), policy)
    result = audit_reports(plan, live, reports, before.reference, before.windows, policy, before.drift, before.blocks)
    if result.set_aside:
        (setaside or DeadLetterProducer(bootstrap, SETASIDE_TOPIC)).send(plan.spec.topic, result.set_aside)
    store.put_poisoning(plan.spec.name, (plan.spec.version, window, start_ms),
                        encode_record((plan.spec.version, window, start_ms), result.attributes, now_ms(),
                                      result.reports, len(result.set_aside), before.windows))
    log.info("%s %s:%s audited: %d reports, %d message(s) with reports set aside", plan.spec.key, window, start_ms,
             result.reports, len(result.set_aside))
    return result


def closed_windows(store: StatsStore, plan: Plan, now: int) -> list[tuple[str, int]]:
    """The windows of the spec version with reports that have closed and have no audit that counts yet, oldest
    first: none, or one made before an attribute's new level was accepted from that window or an earlier one
    (`ldpstream.aggregator.poisoning.accept`), which the audit then makes again on the new history."""
    records = audit_records(store, plan)
    accepted = {w: acceptances(store, plan, w) for w in plan.spec.windows}

    def due(key: WindowKey) -> bool:
        record = records.get(key)
        return record is None or any(a.drops(key[2], record) for a in accepted.get(key[1], {}).values())

    return sorted(((w, s) for v, w, s in store.windows(plan.spec.name)
                   if v == plan.spec.version and w != ALL_TIME and due((v, w, s)) and window_closed(plan, w, s, now)),
                  key=lambda ws: ws[1])
