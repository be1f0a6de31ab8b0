"""The shuffler: reads what the edge admitted for shuffled collections (`ldp.raw.<collection>`), holds each window's
reports, and when a window closes releases them shuffled to the collection's report topic, in one Kafka
transaction with its state and its consumer offsets.

Per tick (every `tick_s`), for each published shuffled spec version whose window C has closed (its end, the spec's
grace and `margin_s` have passed: the edge admits no report of it any more, and what it admitted has reached
Kafka) and was not closed before:
1. read every raw partition of the collection to its end (what the edge wrote before the close);
2. draw the release threshold (`ldpstream.shuffler.state.threshold`), gather the windows held up to C in order
   until they hold that many reports and release each such group at its last window: permute it with the
   operating system's generator and re-encode it canonically (`ldpstream.shuffler.batch`), stamped with that
   window's start; what is left (too few reports) stays held for the next close;
3. in one transaction: the shuffled envelopes to `ldp.reports.<collection>` (round robin over its partitions), the
   collection's state (`ldp.shuffler.state`, keyed by collection: the releases and the last window closed), and
   the offsets to resume from (`Pending.committed`). Aggregators read read_committed: an aborted transaction, or one
   a crash left open (aborted when the next shuffler starts and fences it), is never counted;
4. publish each release's figures (batch size, eps0, central epsilon and delta, the bound) to Redis
   (`ldpstream.contract.shuffled`); again at every start from the state, so a crash between 3 and 4 loses none.
A failure in 1-3 aborts the transaction and the shuffler starts over from the committed offsets and state
(`run` rebuilds it): the window is rebuilt from the raw topic, exactly once.

Shuffled training jobs (protocol section 13.7) go the same way, each a `Collection` named `job/JOB` (no collection
name holds "/") reading `ldp.jobs.raw.JOB`: its updates are held by job version and model version, and a model
version is released when it holds enough updates, not when a window closes: B of them to `ldp.jobs.shuffled`
(`ldpstream.shuffler.jobs`), in the same transaction with the job's state and offsets.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from threading import Event
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import collector_for
from ldpstream.contract.shuffled import DUE_FIELD, encode_figures, figures_field, figures_key, report_path
from ldpstream.contract.spec import CollectionSpec, window_seconds
from ldpstream.contract.topics import (
    JOBS_TOPIC,
    SHUFFLED_UPDATES_TOPIC,
    SHUFFLER_STATE_TOPIC,
    job_raw_topic,
    raw_topic,
)
from ldpstream.contract.training import JobSpec, TrainingWireError
from ldpstream.contract.validation import read_message
from ldpstream.contract.wire import Envelope, WireError, concatenate
from ldpstream.runtime import metrics
from ldpstream.runtime.access import SHUFFLER_GROUP
from ldpstream.runtime.jobs import read_jobs
from ldpstream.runtime.kafka import (
    TopicError,
    admin_client,
    consumer_client,
    producer_client,
    read_to_end,
    topic_partitions,
)
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.specs import PublishedSpecs
from ldpstream.runtime.strategies import strategies_for
from ldpstream.shuffler.accounting import job_figures, report_mechanism, window_figures
from ldpstream.shuffler.batch import MEMORY_ROWS, PER_MESSAGE, WindowRows
from ldpstream.shuffler.jobs import as_rows, decoded, release_size, released_messages
from ldpstream.shuffler.state import Pending, Release, ShufflerState, decode_state, encode_state, releases, threshold

log = logging.getLogger(__name__)
SPEC_POLL_S = 10.0  # how often newly published shuffled collections are looked for


@dataclass(frozen=True)
class ShufflerConfig:
    """Settings of one shuffler process."""

    bootstrap: str
    redis_url: str
    transactional_id: str = SHUFFLER_GROUP
    group: str = SHUFFLER_GROUP
    margin_s: float = 5.0  # after a window's end and grace, how long reports the edge admitted may take into Kafka
    tick_s: float = 1.0
    memory_rows: int = MEMORY_ROWS
    spill_dir: Path | None = None
    per_message: int = PER_MESSAGE


@dataclass
class Collection:
    """One shuffled collection: its published shuffled spec versions, what is held, its state, where it is read."""

    name: str
    specs: dict[int, CollectionSpec]
    mechanisms: dict[int, tuple[str | None, int | None]]
    partitions: int
    pending: Pending
    state: ShufflerState = field(default_factory=ShufflerState)
    read_next: dict[int, int] = field(default_factory=dict)  # raw partition -> the next offset to read
    skipped: int = 0  # raw messages that were not reports of a published shuffled spec (logged)
    due_ms: int | None = None  # when its next window is due to close, as published
    topic: str = ""  # the raw topic it reads (`raw_topic(name)` unless given)
    jobs: dict[int, JobSpec] = field(default_factory=dict)  # a shuffled job's published versions (`specs` empty)
    sizes: dict[tuple[int, int], int] = field(default_factory=dict)  # a job's (version, model version) release size

    def __post_init__(self) -> None:
        self.topic = self.topic or raw_topic(self.name)


@dataclass(frozen=True)
class Outcome:
    """What one release did."""

    collection: str
    spec_version: int
    window_ms: int
    reports: int
    rolled: int
    seconds: float  # from the close to the commit


class Shuffler:
    """One shuffler over every published shuffled collection (module docstring). `clock` gives the time in ms."""

    def __init__(self, cfg: ShufflerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.cfg, self.clock = cfg, clock
        producer: dict[str, Any] = {"transactional.id": cfg.transactional_id, "linger.ms": 5, "compression.type": "lz4",
                                    "queue.buffering.max.messages": 1_000_000, "transaction.timeout.ms": 120_000}
        self.producer = producer_client(cfg.bootstrap, **producer)
        self.producer.init_transactions(60.0)  # fences an earlier shuffler of this id and aborts what it left open
        consumer: dict[str, Any] = {"isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                    "fetch.max.bytes": 64 * 2**20}
        self.consumer = consumer_client(cfg.bootstrap, cfg.group, **consumer)
        self.admin = admin_client(cfg.bootstrap)
        self.redis = redis_client(cfg.redis_url, 5.0)
        self.collections: dict[str, Collection] = {}
        self.outcomes: list[Outcome] = []
        # the published shuffled specs with their mechanisms (the one cache of published specs; one that cannot be
        # loaded is logged once and left out)
        self.specs: PublishedSpecs[tuple[CollectionSpec, tuple[str | None, int | None]]] = PublishedSpecs(
            cfg.bootstrap, lambda spec, _: (spec, self._mechanism(spec)), refresh_s=SPEC_POLL_S,
            wanted=lambda spec: report_path(spec).shuffled)
        self._missing: set[str] = set()  # shuffled collections without a raw topic (logged once)
        self._jobs_at = 0.0  # when the published jobs were last read (monotonic)
        self.follow_specs()

    # -- specs and assignment --------------------------------------------------------------------------------------

    def follow_specs(self) -> None:
        """Take up every published shuffled collection not followed yet (its state, its committed offsets) and new
        versions of those followed; a spec that cannot be loaded is logged once and left out."""
        specs: dict[str, dict[int, tuple[CollectionSpec, tuple[str | None, int | None]]]] = defaultdict(dict)
        for spec, mechanism in self.specs.plans():
            known = self.collections.get(spec.name)
            if known is None or spec.version not in known.specs:
                specs[spec.name][spec.version] = spec, mechanism
        states = self._states() if any(name not in self.collections for name in specs) else {}
        added = False
        for name, versions in specs.items():
            for spec, mechanism in versions.values():
                self._log_floor(spec, mechanism)
            known = self.collections.get(name)
            if known is not None:
                for v, (spec, mechanism) in versions.items():
                    known.specs[v], known.mechanisms[v] = spec, mechanism
                continue
            try:
                partitions = topic_partitions(self.cfg.bootstrap, raw_topic(name))
            except TopicError as exc:  # deleted, or not made yet: looked for again at the next poll
                if name not in self._missing:
                    log.warning("%s: no raw topic to read (%s)", name, exc)
                    self._missing.add(name)
                continue
            self._missing.discard(name)
            self.collections[name] = Collection(name, {v: s for v, (s, _) in versions.items()},
                                                {v: m for v, (_, m) in versions.items()}, partitions,
                                                Pending(self.cfg.memory_rows, self.cfg.spill_dir),
                                                states.get(name, ShufflerState()))
            added = True
        if self._follow_jobs() or added:
            self._assign()
            self._publish_figures()

    def _follow_jobs(self) -> bool:
        """Take up every published shuffled job not followed yet (as `follow_specs`), and new versions of those
        followed; whether one was taken up."""
        self._jobs_at = time.monotonic()
        try:
            published = read_jobs(self.cfg.bootstrap)
        except TopicError as exc:  # no job published yet, and this principal may not create their topic
            if JOBS_TOPIC not in self._missing:
                log.info("no training jobs to follow: %s", exc)
                self._missing.add(JOBS_TOPIC)
            return False
        self._missing.discard(JOBS_TOPIC)
        states: dict[str, ShufflerState] | None = None
        added = False
        for signed in published.values():
            spec = signed.spec
            if spec.shuffle is None:
                continue
            known = self.collections.get(spec.key)
            if known is not None:
                known.jobs.setdefault(spec.version, spec)
                continue
            try:
                partitions = topic_partitions(self.cfg.bootstrap, job_raw_topic(spec.job_id))
            except TopicError as exc:
                if spec.key not in self._missing:
                    log.warning("%s: no raw topic to read (%s)", spec.key, exc)
                    self._missing.add(spec.key)
                continue
            self._missing.discard(spec.key)
            states = self._states() if states is None else states
            self.collections[spec.key] = Collection(spec.key, {}, {}, partitions,
                                                    Pending(self.cfg.memory_rows, self.cfg.spill_dir),
                                                    states.get(spec.key, ShufflerState()),
                                                    topic=job_raw_topic(spec.job_id), jobs={spec.version: spec})
            figures = job_figures(spec, 0, 0)
            log.info("%s: each model version's %d updates at eps0 = %g are (%.4g, %g)-DP (%s)", spec.key,
                     figures.reports, figures.epsilon0, figures.epsilon, figures.delta, figures.bound)
            added = True
        return added

    def _by_topic(self, topic: str) -> Collection | None:
        return next((c for c in self.collections.values() if c.topic == topic), None)

    @staticmethod
    def _log_floor(spec: CollectionSpec, mechanism: tuple[str | None, int | None]) -> None:
        """Log what the smallest batch the spec allows promises (and load the accountant, once, before a close)."""
        assert spec.shuffle is not None
        floor = window_figures(spec, mechanism, 0, spec.shuffle.min_batch, 0, 0)
        log.info("%s: a batch of %d reports at eps0 = %g is (%.4g, %g)-DP (%s)", spec.key, floor.reports,
                 floor.epsilon0, floor.epsilon, floor.delta, floor.bound)

    def _mechanism(self, spec: CollectionSpec) -> tuple[str | None, int | None]:
        return report_mechanism(collector_for(spec, strategies_for(spec, self.cfg.bootstrap)).mechanisms)

    def _states(self) -> dict[str, ShufflerState]:
        """The latest state of each collection from the state topic (committed transactions only)."""
        out: dict[str, ShufflerState] = {}
        for record in read_to_end(self.cfg.bootstrap, SHUFFLER_STATE_TOPIC):
            if record.key is None or record.value is None:
                continue
            try:
                out[record.key.decode()] = decode_state(record.value)
            except (ValueError, UnicodeDecodeError) as exc:
                log.error("a shuffler state record is unreadable (%s): left out", exc)
        return out

    def _assign(self) -> None:
        """Read every followed collection's raw partitions: a partition read before goes on from where it was read
        to (what it held is in memory, and its committed offset is behind it), a new one from its committed offset
        (the beginning if none)."""
        tps = [TopicPartition(c.topic, p) for c in self.collections.values() for p in range(c.partitions)]
        committed = self.consumer.committed(tps, timeout=30.0)
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
            c = self._by_topic(tp.topic)
            assert c is not None
            if tp.partition in c.read_next:  # re-reading from the committed offset would hold its rows twice
                tp.offset = c.read_next[tp.partition]
                continue
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            c.read_next[tp.partition] = max(tp.offset, 0)
        self.consumer.assign(committed)
        log.info("reading %s", ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in committed))

    def _publish_figures(self) -> None:
        """Every figure in the states to Redis (idempotent); a Redis outage is logged, the next release retries."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            for c in self.collections.values():
                for f in c.state.figures:
                    pipe.hset(figures_key(c.name), figures_field(f.spec_version, f.window_ms), encode_figures(f))
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - redis errors of every kind: the figures are published again later
            log.warning("shuffle figures not published: %s", exc)

    # -- reading ---------------------------------------------------------------------------------------------------

    def read(self, timeout_s: float, max_messages: int = 2000) -> int:
        """Take what the raw topics hold (waiting up to `timeout_s` for the first message); the rows held."""
        messages = self.consumer.consume(max_messages, timeout_s)
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for m in messages:
            error = m.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", m.topic(), error.str())
                continue
            by_topic[m.topic() or ""].append(m)
        held = 0
        for topic, batch in by_topic.items():
            c = self._by_topic(topic) if topic else None
            if c is not None:
                held += self._hold(c, batch)
        return held

    def _hold(self, c: Collection, messages: list[Any]) -> int:
        by_version: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)  # envelopes, or a job's updates
        skipped = c.skipped
        for m in messages:
            partition, offset = m.partition(), m.offset()
            if offset < c.read_next.get(partition, 0):  # held already (a partition is read in order): never twice
                log.error("%s: raw message at %d/%d read again: left out, it is held already", c.name, partition,
                          offset)
                continue
            c.read_next[partition] = offset + 1
            if c.jobs:
                self._hold_update(c, m, by_version)
                continue
            kind, produced_ms = m.timestamp()
            env = self._envelope(c, m.value(), None if kind == TIMESTAMP_NOT_AVAILABLE else produced_ms)
            if env is None:
                c.skipped += 1
                continue
            by_version[env.spec_version].append((partition, offset, env))
        held = 0
        for version, items in by_version.items():
            joined = as_rows([u for _, _, u in items]) if c.jobs else concatenate([env for _, _, env in items])
            for i, reason in joined.rejected.items():
                log.error("%s: raw message at %d/%d left out: %s", c.name, items[i][0], items[i][1], reason)
            c.skipped += len(joined.rejected)
            held += c.pending.add(c.state, version, joined, np.array([p for p, _, _ in items]),
                                  np.array([o for _, o, _ in items]))
        metrics.SHUFFLER_HELD.labels(c.name).set(c.pending.total)
        metrics.SHUFFLER_READ.labels(c.name).inc(held)
        metrics.SHUFFLER_SKIPPED.labels(c.name).inc(c.skipped - skipped)
        return held

    def _hold_update(self, c: Collection, m: Any, by_version: dict[int, list[Any]]) -> None:
        """A raw message of a shuffled job into `by_version` if it is an update of a published version of the job
        whose model version was not released yet (one already released is dropped: it could only be refused)."""
        try:
            update = decoded(m.value(), c.jobs)
        except TrainingWireError as exc:
            log.error("%s: raw message at %d/%d left out: %s", c.name, m.partition(), m.offset(), exc)
            c.skipped += 1
            return
        if m.key() is not None:
            log.error("%s: raw message at %d/%d has a key: not the edge's", c.name, m.partition(), m.offset())
            c.skipped += 1
        elif update.model_version > c.state.closed.get(update.job_version, -1):
            by_version[update.job_version].append((m.partition(), m.offset(), update))

    def _observe_lag(self, c: Collection) -> None:
        """The collection's raw lag (`ldp_shuffler_raw_lag_messages`) from the watermarks the consumer last fetched
        (no request to the broker); partitions not fetched yet are left out."""
        lag = 0
        for p in range(c.partitions):
            marks = self.consumer.get_watermark_offsets(TopicPartition(c.topic, p), cached=True)
            if marks is not None and marks[1] >= 0:
                lag += max(0, marks[1] - c.read_next.get(p, max(marks[0], 0)))
        metrics.SHUFFLER_LAG.labels(c.name).set(lag)

    def _envelope(self, c: Collection, value: bytes | None, produced_ms: int | None) -> Envelope | None:
        """A raw message's envelope if it holds reports of a published shuffled version of the collection, made
        anonymous by the edge (every device 0; times are window starts); else None (logged). The raw topic is the
        edge's to write, but its bytes are checked as any outside bytes. A version published since the specs were
        last looked at (`produced_ms`: the message's Kafka timestamp, `PublishedSpecs.get`) is followed first."""
        try:
            env, _ = read_message(value or b"")
        except WireError as exc:
            log.error("%s: a raw message is malformed: %s", c.name, exc)
            return None
        spec = c.specs.get(env.spec_version)
        if spec is None and env.collection == c.name:
            published = self.specs.get(c.name, env.spec_version, produced_ms)
            if published is not None:  # followed now, as `follow_specs` follows a new version
                (spec, mechanism), v = published, env.spec_version
                self._log_floor(spec, mechanism)
                c.specs[v], c.mechanisms[v] = spec, mechanism
        if env.collection != c.name or spec is None:
            log.error("%s: a raw message of %s@%d, which is no published shuffled spec", c.name, env.collection,
                      env.spec_version)
            return None
        times = np.frombuffer(env.timestamps, dtype="<i8")
        length = window_seconds(spec.windows[0]) * 1000
        if np.frombuffer(env.devices, dtype="<u8").any() or (times % length).any():
            log.error("%s: a raw message names devices or times within a window: not the edge's", c.name)
            return None
        return env

    def catch_up(self, c: Collection, timeout_s: float = 60.0) -> None:
        """Read until every raw partition of `c` is read to the end it has now; TimeoutError past `timeout_s`."""
        tps = [TopicPartition(c.topic, p) for p in range(c.partitions)]
        latest = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=10.0)
        earliest = self.admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, request_timeout=10.0)
        ends = {tp.partition: f.result().offset for tp, f in latest.items()}
        for tp, f in earliest.items():  # retention may have deleted the start
            c.read_next[tp.partition] = max(c.read_next.get(tp.partition, 0), f.result().offset)
        deadline = time.monotonic() + timeout_s
        while any(c.read_next.get(p, 0) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{c.name}: raw partitions not read to their end within {timeout_s:g} s")
            if self.read(0.2) == 0:
                self._skip_markers(c, ends)

    def _skip_markers(self, c: Collection, ends: dict[int, int]) -> None:
        """A partition whose last offsets are transaction markers or aborted messages (none the consumer sees) is
        read to its end when the consumer's position is there."""
        tps = [TopicPartition(c.topic, p) for p in ends]
        for tp in self.consumer.position(tps):
            if tp.offset >= 0:
                c.read_next[tp.partition] = max(c.read_next.get(tp.partition, 0), tp.offset)

    # -- closing windows -------------------------------------------------------------------------------------------

    def due(self, spec: CollectionSpec, now: int) -> int | None:
        """The latest window of the spec that has closed by `now` (its end, grace and the margin passed)."""
        assert spec.shuffle is not None
        length = window_seconds(spec.windows[0]) * 1000
        closed_by = now - length - spec.shuffle.grace_s * 1000 - int(self.cfg.margin_s * 1000)
        return None if closed_by < 0 else (closed_by // length) * length

    def tick(self) -> list[Outcome]:
        """Close every window due (module docstring); the releases made."""
        if self.specs.age_s() > SPEC_POLL_S or time.monotonic() - self._jobs_at > SPEC_POLL_S:
            self.follow_specs()
        made: list[Outcome] = []
        for c in self.collections.values():
            self._observe_lag(c)
            now = self.clock()
            if c.jobs:
                if self._job_plans(c):
                    self.catch_up(c)
                    made += self._close(c, self._job_plans(c), None, now)
                continue
            due = {v: self.due(spec, now) for v, spec in c.specs.items()}
            closes = {v: w for v, w in due.items() if w is not None and w > c.state.closed.get(v, -1)}
            if not closes:
                continue
            self.catch_up(c)
            plans = []
            for v, window in sorted(closes.items()):
                shuffle = c.specs[v].shuffle
                assert shuffle is not None
                plans += [(v, at, group) for at, group in releases(c.pending, v, window, threshold(shuffle.min_batch))]
            made += self._close(c, closes, plans, now)
            self._publish_due(c)
        return made

    def _publish_due(self, c: Collection) -> None:
        """The collection's next due close to Redis (`DUE_FIELD`) when it changed: a shuffler that stops closing
        windows shows as overdue on the API's metrics; a Redis outage is logged, the next close retries."""
        due = next_due(c, self.cfg.margin_s)
        if due is None or due == c.due_ms:
            return
        try:
            self.redis.hset(figures_key(c.name), DUE_FIELD, str(due))
            c.due_ms = due
        except Exception as exc:  # noqa: BLE001 - redis errors of every kind: published again at the next close
            log.warning("%s: next due close not published: %s", c.name, exc)

    def _job_plans(self, c: Collection) -> dict[int, int]:
        """A shuffled job's model versions to release (job version -> model version): those holding their release
        size (`ldpstream.shuffler.jobs.release_size`, drawn once per version)."""
        out: dict[int, int] = {}
        for v, spec in c.jobs.items():
            for w in c.pending.held(v, 2**62):
                size = c.sizes.setdefault((v, w), release_size(spec))
                if c.pending.count(v, w) >= size:
                    out[v] = w
        return out

    def _close(self, c: Collection, closes: dict[int, int], plans: list[tuple[int, int, list[int]]] | None,
               started: int) -> list[Outcome]:
        """One transaction closing windows `closes` (spec version -> window) of a collection, releasing the groups
        `plans` ((spec version, window released at, windows)); a shuffled job's `closes` (job version -> model
        version) each released alone (`plans` None)."""
        if plans is None:
            plans = [(v, w, [w]) for v, w in sorted(closes.items())]
        self.producer.begin_transaction()
        try:
            made, figures, new_releases = [], [], []
            for v, at, group in plans:
                own = c.pending.count(v, at)
                for earlier in c.pending.held(v, at - 1) if c.jobs else []:  # a job's: its release marks them taken
                    c.pending.take(v, [earlier]).discard()
                rows = c.pending.take(v, group)
                new_releases.append(Release(v, at, dict(c.read_next)))
                if c.jobs:
                    c.sizes.pop((v, at), None)
                    figures.append(job_figures(c.jobs[v], at, self.clock()))
                    self._produce_updates(c.jobs[v], at, rows)
                else:
                    figures.append(window_figures(c.specs[v], c.mechanisms[v], at, rows.n, rows.n - own,
                                                  self.clock()))
                    self._produce(c.specs[v], at, rows)
                made.append((v, at, figures[-1].reports))
            state = ShufflerState(c.state.releases + new_releases, {**c.state.closed, **closes},
                                  c.state.figures + figures)
            committed = c.pending.committed(c.read_next)
            state = state.trimmed(committed)
            self.producer.produce(SHUFFLER_STATE_TOPIC, encode_state(state), c.name.encode())
            self.producer.send_offsets_to_transaction(
                [TopicPartition(c.topic, p, o) for p, o in sorted(committed.items())],
                self.consumer.consumer_group_metadata(), 30.0)
            self.producer.commit_transaction(60.0)
        except BaseException:
            self._abort()
            raise
        c.state = state
        self._publish_figures()
        for _, _, n in made:
            metrics.SHUFFLER_BATCHES.labels(c.name).inc()
            metrics.SHUFFLER_REPORTS.labels(c.name).inc(n)
        metrics.SHUFFLER_HELD.labels(c.name).set(c.pending.total)
        seconds = (self.clock() - started) / 1000
        if made:
            metrics.SHUFFLER_LAST_RELEASE.labels(c.name).set(time.time())
            metrics.SHUFFLER_RELEASE_SECONDS.labels(c.name).set(seconds)
        outcomes = [Outcome(c.name, v, at, n, f.rolled, seconds) for (v, at, n), f in zip(made, figures, strict=True)]
        for o in outcomes:
            log.info("%s@%d: released %d reports of window %d (%d rolled in) in %.2f s", o.collection, o.spec_version,
                     o.reports, o.window_ms, o.rolled, o.seconds)
        self.outcomes += outcomes
        return outcomes

    def _produce(self, spec: CollectionSpec, window_ms: int, rows: WindowRows) -> None:
        """The rows shuffled, as canonical envelopes stamped `window_ms`, round robin over the report topic's
        partitions from a random one (inside the open transaction)."""
        partition = secrets.randbelow(spec.partitions)
        for part in rows.shuffled():
            for value in part.envelopes(spec.name, spec.version, window_ms, self.cfg.per_message):
                while True:
                    try:
                        self.producer.produce(spec.topic, value, partition=partition, timestamp=window_ms)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                partition = (partition + 1) % spec.partitions
        rows.discard()

    def _produce_updates(self, spec: JobSpec, model_version: int, rows: WindowRows) -> None:
        """B of a job's model version's updates, shuffled, to `ldp.jobs.shuffled` without a key, round robin over its
        partitions from a random one (inside the open transaction; `ldpstream.shuffler.jobs`)."""
        partitions = topic_partitions(self.cfg.bootstrap, SHUFFLED_UPDATES_TOPIC)
        partition = secrets.randbelow(partitions)
        for value in released_messages(spec, model_version, rows):
            self.producer.produce(SHUFFLED_UPDATES_TOPIC, value, partition=partition)
            partition = (partition + 1) % partitions
        log.info("%s@%d: %d updates of model version %d released, %d dropped", spec.key, spec.version,
                 spec.batch_size, model_version, rows.n - spec.batch_size)

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(30.0)
        except KafkaException as exc:
            log.error("cannot abort the transaction (the next shuffler's start aborts it): %s", exc)

    def close(self) -> None:
        for c in self.collections.values():
            c.pending.discard()
        self.consumer.close()
        self.producer.flush(10.0)

    def serve(self, stop: Event) -> None:
        """Read and close windows until `stop` is set (between ticks: a release is whole or not at all)."""
        next_tick = time.monotonic()
        while not stop.is_set():
            self.read(min(self.cfg.tick_s, max(0.0, next_tick - time.monotonic())) or 0.01)
            if time.monotonic() >= next_tick:
                self.tick()
                next_tick = time.monotonic() + self.cfg.tick_s


def next_due(c: Collection, margin_s: float) -> int | None:
    """When the first window not closed yet of any spec version of `c` is due to close (epoch ms: the window after
    the last closed ends, then its grace and the margin pass); None before the first close."""
    dues = []
    for v, spec in c.specs.items():
        if v in c.state.closed:
            assert spec.shuffle is not None
            length = window_seconds(spec.windows[0]) * 1000
            dues.append(c.state.closed[v] + 2 * length + spec.shuffle.grace_s * 1000 + int(margin_s * 1000))
    return min(dues, default=None)


def run(cfg: ShufflerConfig, stop: Event, retry_s: float = 2.0) -> None:
    """Serve until `stop`; after a failure (Kafka, Redis, a fenced producer), start over from the committed offsets
    and state with new clients (module docstring: exactly once)."""
    while not stop.is_set():
        shuffler = None
        try:
            shuffler = Shuffler(cfg)
            shuffler.serve(stop)
        except Exception:
            log.exception("the shuffler failed; starting over from its committed offsets in %.0f s", retry_s)
            stop.wait(retry_s)
        finally:
            if shuffler is not None:
                try:
                    shuffler.close()
                except Exception:  # noqa: BLE001 - closing after a failure: nothing more to do
                    log.warning("closing the shuffler's clients failed", exc_info=True)
