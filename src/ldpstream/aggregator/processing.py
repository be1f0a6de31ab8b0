"""One micro-batch of a topic's partitions -> the store update and the dead-letter records. Pure: no Kafka, no Redis.

Steps, all vectorised over the batch's reports:
1. decode each message and check its structure as far as byte lengths tell (`ldpstream.contract.wire.decode_envelope`,
   `check_envelope`); an undecodable one is rejected whole;
2. check the collection (it must match the topic) and the spec version (it must be published);
3. check every attribute block against its mechanism's declared report schema (shape, from byte lengths: whole
   message), concatenate the messages of each spec version into numpy columns (`ldpstream.contract.wire.concatenate`:
   one `np.frombuffer` per column; a message whose rows are malformed is rejected whole), then check the range
   of every report (per device), that each device reports exactly the spec's number of attributes, and that each
   device's report is on the device's partition (`ldpstream.contract.pseudonym.device_partitions`: what makes dedupe
   partition-local);
4. check the report times (not older than the dedupe window, not from the future);
5. drop later reports of a device already seen in the same dedupe window within the batch, or counted before by
   its partition (`SeenLookup`, the worker's `ldpstream.aggregator.dedupe.SeenDevices`);
6. accumulate each attribute's additive statistics per window (the spec's tumbling windows and all-time).
A rejected device's report goes to the dead-letter topic with its reason; nothing of it is counted.

Messages are outside bytes, and no content of theirs makes `process` raise: the decoders raise only `WireError`, and
should anything in steps 1-6 raise on some message all the same (a bug the checks missed), that message alone is taken
out of the batch and dead-lettered as `malformed` with the exception (`ldpstream.runtime.dlq.isolating`); the rest are
processed as if it had not come. Every message of a batch is counted in the outcomes or dead-lettered.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ldpstream.aggregator.store import ALL_TIME, BatchUpdate, OffsetRange, WindowIncrement, WindowKey
from ldpstream.contract.pseudonym import device_partitions
from ldpstream.contract.shuffled import report_path
from ldpstream.contract.spec import CollectionSpec, window_seconds
from ldpstream.contract.topics import collection_of, report_topic, source
from ldpstream.contract.validation import (
    DUPLICATE,
    FUTURE,
    MALFORMED,
    MAX_FUTURE_SKEW_MS,
    OUT_OF_RANGE,
    STALE,
    UNKNOWN_COLLECTION,
    WRONG_SHAPE,
    dedupe_window,
    envelope_problem,
    read_message,
    screen,
    shaped,
    window_starts,
)
from ldpstream.contract.wire import AttributeColumns, Envelope, WireError, concatenate
from ldpstream.mechanisms.base import Mechanism, ReportSchema
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.runtime.dlq import DeadLetter, Message, isolating, lookup

# Reason codes: a bounded set (they are metric labels); the detail goes in the dead-letter record.
UNKNOWN_VERSION = "unknown_wire_version"
WRONG_PARTITION = "wrong_partition"
POISON = "poison"
REASONS = (MALFORMED, UNKNOWN_VERSION, UNKNOWN_COLLECTION, WRONG_SHAPE, OUT_OF_RANGE, DUPLICATE, STALE, FUTURE,
           WRONG_PARTITION, POISON)
_CODES = {reason: i + 1 for i, reason in enumerate(REASONS)}  # per row: 0 accepted, else the reason's code


class CollectionPlan(Protocol):
    """What the aggregator needs of a collection: its spec, one mechanism per attribute, reports per device."""

    @property
    def spec(self) -> CollectionSpec: ...

    @property
    def mechanisms(self) -> Sequence[Mechanism]: ...

    @property
    def schemas(self) -> Sequence[ReportSchema]: ...

    @property
    def attributes_per_device(self) -> int: ...


class SeenLookup(Protocol):
    """The devices each partition has counted per dedupe window, and the applied offset they are read at."""

    def contains(self, topic: str, partition: int, key: WindowKey, devices: np.ndarray) -> np.ndarray:
        """Per device (uint64, sorted), whether the partition has counted it in the window `key` = (version,
        window, start ms)."""
        ...

    def synced(self, topic: str, partition: int) -> int:
        """The applied offset of the partition that the answers of `contains` match."""
        ...


@dataclass
class PartitionResult:
    """The store update (None if nothing to write) and the dead letters of a partition's micro-batch."""

    update: BatchUpdate | None
    dead_letters: list[DeadLetter] = field(default_factory=list)


@dataclass
class _Counted:
    """What steps 1-6 make of some messages: dead letters, window increments, outcome counts, the newest report."""

    letters: list[DeadLetter] = field(default_factory=list)
    windows: list[WindowIncrement] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    newest: int | None = None


@dataclass
class _Rows:
    """The decoded reports of the batch's messages, concatenated."""

    message: np.ndarray  # index of the message of each row
    local_row: np.ndarray  # row within its message
    devices: np.ndarray
    timestamps: np.ndarray
    attributes: dict[int, tuple[np.ndarray, dict[str, np.ndarray]]]  # attr -> (global rows, columns)


class PartitionProcessor:
    """Turns the micro-batches of one topic's partitions into store updates; knows the published plans (`plans`:
    a collection, its spec version and the Kafka timestamp of the message naming them -> its plan, None if it is not
    published: `ldpstream.runtime.specs.PublishedSpecs.get`)."""

    def __init__(self, plans: Callable[[str, int, int | None], CollectionPlan | None], clock_ms: Callable[[], int],
                 max_skew_ms: int = MAX_FUTURE_SKEW_MS) -> None:
        self.plans = plans
        self.clock_ms = clock_ms
        self.max_skew_ms = max_skew_ms  # how far ahead of clock_ms a report's time may be (`time_problems`)

    def process(self, topic: str, messages: Sequence[Message], seen: SeenLookup | None = None,
                quarantined: Collection[tuple[int, int]] = (), continues: Mapping[int, int] | None = None
                ) -> PartitionResult:
        """The update and dead letters of a micro-batch of one topic: consecutive messages of one or more partitions.

        `seen`: the devices each partition counted before; their reports in the same window are duplicates, and the
        update's offset ranges expect the applied offsets `seen` is synced at. None: only the batch is deduplicated.
        `quarantined`: (partition, offset) of messages rejected whole as `poison` without being decoded
        (`ldpstream.aggregator.quarantine`). `continues`: per partition, the offset after the last message the reader
        took before this batch; a partition's range starts there when its first message lies beyond it (offsets a
        read_committed consumer never sees: the shuffler's transaction markers and aborted writes). Raises only what
        `seen` raises (Redis), never for the messages' content (module docstring).
        """
        if not messages:
            return PartitionResult(None)
        poison = [_whole(m, POISON, "in hand at two worker crashes: quarantined, not decoded")
                  for m in messages if (m.partition, m.offset) in quarantined]
        rest = [m for m in messages if (m.partition, m.offset) not in quarantined] if poison else messages
        counted, isolated = isolating(lambda batch: self._counted(topic, batch, seen), rest, MALFORMED)
        for letter in poison + isolated:
            counted.outcomes[f"rejected:{letter.reason}"] += 1
        ranges: dict[int, list[int]] = {}
        for m in messages:
            first_last = ranges.setdefault(m.partition, [m.offset, m.offset])
            first_last[0], first_last[1] = min(first_last[0], m.offset), max(first_last[1], m.offset)
        after = continues or {}
        offsets = tuple(OffsetRange(source(topic, p), min(lo, after.get(p, lo)), hi,
                                    None if seen is None else seen.synced(topic, p))
                        for p, (lo, hi) in sorted(ranges.items()))
        update = BatchUpdate(collection_of(topic), offsets, tuple(counted.windows), dict(counted.outcomes),
                             counted.newest)
        return PartitionResult(update, poison + counted.letters + isolated)

    def _counted(self, topic: str, messages: Sequence[Message], seen: SeenLookup | None) -> _Counted:
        """Steps 1-6 for some messages of the batch (all of them, unless some had to be isolated)."""
        counted = _Counted()
        by_version: dict[int, list[tuple[Message, Envelope, CollectionPlan]]] = defaultdict(list)
        for msg in messages:
            plan_or_letter = self._decode(topic, msg)
            if isinstance(plan_or_letter, DeadLetter):
                counted.letters.append(plan_or_letter)
            else:
                by_version[plan_or_letter[0].spec_version].append((msg, *plan_or_letter))
        versions: list[tuple[list[tuple[Message, Envelope, CollectionPlan]], _Rows]] = []
        for _, items in sorted(by_version.items()):
            rows, malformed = _concatenate(items)
            counted.letters += malformed
            if len(rows.devices):
                versions.append((items, rows))
        for letter in counted.letters:
            counted.outcomes[f"rejected:{letter.reason}"] += 1
        for items, rows in versions:
            incs, rejected, newest = self._accumulate(topic, items, rows, counted.outcomes, seen)
            counted.letters += rejected
            counted.windows += incs
            if newest is not None:
                counted.newest = newest if counted.newest is None else max(counted.newest, newest)
        return counted

    def _decode(self, topic: str, msg: Message) -> tuple[Envelope, CollectionPlan] | DeadLetter:
        """The message's envelope, checked as far as byte lengths tell, and its plan; or why it is rejected whole."""
        try:
            env, _ = read_message(msg.value)
        except WireError as exc:
            reason = UNKNOWN_VERSION if str(exc).startswith("unknown wire version") else MALFORMED
            return _whole(msg, reason, str(exc))
        if report_topic(env.collection) != topic:
            return _whole(msg, UNKNOWN_COLLECTION, f"collection {env.collection!r} does not belong on topic {topic}")
        plan = self.plans(env.collection, env.spec_version, msg.timestamp_ms)
        problem = envelope_problem(env, plan)
        if problem is not None:
            return _whole(msg, *problem)
        assert plan is not None
        return env, plan

    def _accumulate(self, topic: str, items: list[tuple[Message, Envelope, CollectionPlan]], rows: _Rows,
                    outcomes: dict[str, int], seen: SeenLookup | None) -> tuple[list[WindowIncrement],
                                                                                list[DeadLetter], int | None]:
        plan = items[0][2]
        spec = plan.spec
        n = len(rows.devices)
        reasons = np.zeros(n, dtype=np.int8)
        details: dict[str, str] = {}
        # 3. range of every report, and its number of attributes (`ldpstream.contract.validation`, as the edge runs it)
        columns = {a: AttributeColumns(grow, cols) for a, (grow, cols) in rows.attributes.items()}
        problems = screen(plan, columns, rows.timestamps, self.clock_ms(), self.max_skew_ms)
        if problems.out_of_range.any():
            _mark(reasons, np.flatnonzero(problems.out_of_range), OUT_OF_RANGE)
            details[OUT_OF_RANGE] = problems.out_of_range_detail
        if problems.wrong_count.any():
            _mark(reasons, np.flatnonzero(problems.wrong_count), WRONG_SHAPE)
            details.setdefault(WRONG_SHAPE, f"a device must report {plan.attributes_per_device} attribute(s)")
        partitions = np.array([m.partition for m, _, _ in items], dtype=np.int64)[rows.message]
        # a shuffled collection's reports are judged by no device (`ldpstream.contract.shuffled`): no partition,
        # age or duplicate to judge
        per_device = report_path(spec).per_device
        misplaced = device_partitions(rows.devices, spec.partitions) != partitions if per_device else None
        if misplaced is not None and misplaced.any():
            _mark(reasons, np.flatnonzero(misplaced), WRONG_PARTITION)
            details.setdefault(WRONG_PARTITION, f"a device's reports go to partition (pseudonym mod {spec.partitions})")
        # 4. report times
        _mark(reasons, np.flatnonzero(problems.future), FUTURE)
        if per_device:
            _mark(reasons, np.flatnonzero(problems.stale), STALE)
        details.setdefault(FUTURE, "report time is in the future")
        details.setdefault(STALE, "report time is older than the dedupe window")
        # 5. duplicates, per partition and window: within the batch (the first report of a device wins), and
        # against what the partition counted before (a device's accepted rows are all on its own partition)
        dwin, starts = dedupe_window(spec), problems.starts
        if spec.one_report_per_window and per_device:
            for (part, start), group in _groups(reasons == 0, partitions, starts):
                order = group[np.argsort(rows.devices[group], kind="stable")]  # by device, then arrival
                devices = rows.devices[order]
                _mark(reasons, order[1:][devices[1:] == devices[:-1]], DUPLICATE)
                if seen is not None:
                    known = lookup(seen.contains, topic, part, (spec.version, dwin, start), devices)
                    _mark(reasons, order[known], DUPLICATE)
            details.setdefault(DUPLICATE, "device already reported in this window")
        letters = _dead_letters(items, rows, reasons, details)
        accepted = reasons == 0
        counts = np.bincount(reasons, minlength=len(REASONS) + 1)
        outcomes["accepted"] += int(counts[0])
        for reason, k in zip(REASONS, counts[1:].tolist(), strict=True):
            if k:
                outcomes[f"rejected:{reason}"] += k
        incs = self.window_increments(plan, rows, accepted, dwin, partitions, self.max_skew_ms)
        newest = int(rows.timestamps[accepted].max()) if accepted.any() else None
        return incs, letters, newest

    @staticmethod
    def window_increments(plan: CollectionPlan, rows: _Rows, accepted: np.ndarray, dwin: str,
                          partitions: np.ndarray, max_skew_ms: int) -> list[WindowIncrement]:
        """6. Additive statistics of the accepted reports per window and window start; in the dedupe window, the
        devices counted, per partition (`partitions`: each row's), kept in the store (TTL) until no report of the
        window can come any more: a report up to the clock skew ahead, then two window lengths."""
        spec = plan.spec
        incs: list[WindowIncrement] = []
        ttl = 2 * window_seconds(dwin) + -(-max_skew_ms // 1000) if dwin != ALL_TIME else 0
        for window in [*spec.windows, ALL_TIME]:
            starts = window_starts(window, rows.timestamps)
            for start in _distinct(starts[accepted]):
                member = accepted & (starts == start)
                stats = {}
                for attr, (grow, cols) in rows.attributes.items():
                    take = member[grow]
                    if take.any():
                        schema = plan.schemas[attr]
                        sub = shaped(cols, schema, len(grow))
                        # as the declared dtypes (a message may carry another one): safe for rows in range
                        counted = plan.mechanisms[attr].accumulate({k: v[take].astype(schema.dtypes[k], copy=False)
                                                                    for k, v in sub.items()})
                        stats[attr] = attribute_block(take.sum(), counted)
                dedupe = None
                if spec.one_report_per_window and report_path(spec).per_device and window == dwin:
                    dedupe = {int(p): rows.devices[member & (partitions == p)] for p in _distinct(partitions[member])}
                incs.append(WindowIncrement(spec.version, window, int(start), int(member.sum()), stats, dedupe, ttl))
        return incs


def _concatenate(items: list[tuple[Message, Envelope, CollectionPlan]]) -> tuple[_Rows, list[DeadLetter]]:
    """The reports of a spec version's messages as rows, and a dead letter for each message whose rows are malformed
    (none of its rows is among them)."""
    joined = concatenate([env for _, env, _ in items])
    letters = [_whole(items[m][0], MALFORMED, reason) for m, reason in joined.rejected.items()]
    bases = np.cumsum(joined.sizes) - joined.sizes
    local = np.arange(len(joined.devices)) - np.repeat(bases, joined.sizes)
    attributes = {a: (c.rows, c.columns) for a, c in joined.attributes.items()}
    rows = _Rows(np.repeat(joined.messages, joined.sizes), local, joined.devices, joined.timestamps_ms, attributes)
    return rows, letters


def _whole(msg: Message, reason: str, detail: str) -> DeadLetter:
    """A whole message rejected."""
    return DeadLetter(msg.offset, msg.value, reason, detail, partition=msg.partition)


def _groups(mask: np.ndarray, *keys: np.ndarray) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """The rows where `mask` holds, grouped by their values of the key columns (few distinct values each)."""
    rows = np.flatnonzero(mask)
    groups: list[tuple[tuple[int, ...], np.ndarray]] = [((), rows)]
    for key in keys:
        groups = [(k + (int(v),), g[key[g] == v]) for k, g in groups for v in _distinct(key[g])]
    return groups


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an array, cheaply when they are all equal (the usual case in a micro-batch)."""
    if not len(values):
        return values
    low, high = values.min(), values.max()
    if high - low < 4096:  # partitions, or a single window start
        return np.flatnonzero(np.bincount(values - low)) + low
    return np.unique(values)


def _mark(reasons: np.ndarray, rows: np.ndarray, reason: str) -> None:
    """Give `reason` to the rows that have none yet (the first reason found is the one reported)."""
    if len(rows):
        free = rows[reasons[rows] == 0]
        reasons[free] = _CODES[reason]


def _dead_letters(items: list[tuple[Message, Envelope, CollectionPlan]], rows: _Rows, reasons: np.ndarray,
                  details: dict[str, str]) -> list[DeadLetter]:
    """One dead letter per message and reason: the whole message (rows None) or its rejected rows."""
    bad = np.flatnonzero(reasons != 0)
    if not len(bad):
        return []
    sizes = np.bincount(rows.message, minlength=len(items))
    order = bad[np.lexsort((bad, reasons[bad], rows.message[bad]))]  # by message, reason, then row
    key = rows.message[order] * (len(REASONS) + 1) + reasons[order]
    letters = []
    for sel in np.split(order, np.flatnonzero(np.diff(key)) + 1):
        msg, reason = items[int(rows.message[sel[0]])][0], REASONS[int(reasons[sel[0]]) - 1]
        whole = len(sel) == sizes[rows.message[sel[0]]]
        letters.append(DeadLetter(msg.offset, msg.value, reason, details.get(reason, reason),
                                  None if whole else tuple(rows.local_row[sel].tolist()), msg.partition))
    return letters
