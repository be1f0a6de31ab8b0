"""The aggregator worker: a faust-streaming app reading every `ldp.reports.<collection>` topic in micro-batches.

Per micro-batch (`stream.take_events`), per topic (all its partitions together: one processing pass and one store
write, so the fixed costs are paid once per micro-batch, not once per partition; see `ldpstream.aggregator.store`):
1. decode, validate and accumulate the messages (`ldpstream.aggregator.processing`, vectorised), deduplicating against
the
   devices each partition counted before (`ldpstream.aggregator.dedupe.SeenDevices`, in memory, loaded from Redis);
2. send the dead letters to `ldp.dlq` and wait until Kafka has them (at-least-once: a crash before step 3 means
   the batch, and so its dead letters, come again);
3. apply the statistics, outcome counters, new devices and the new offset in one atomic Redis script. If the script
   answers `overlap` (part of the batch was applied: a replay after a rebalance, or the writes of another worker
   reading the same partition, e.g. one of another consumer group), drop the messages at or below the applied
   offset, start those partitions' next range after it, forget their dedupe lists and go to 1; if it answers `gap`
   (the store went back in time: a partition's batch starts beyond its applied offset + 1), drop those partitions'
   messages, forget their lists, have them read again from applied + 1 (`restart_worker`) and go to 1 with the
   rest; if it answers `stale` (another worker applied batches of a partition since its lists were loaded), forget
   them and go to 1; `skipped` (all of it was applied) ends here.
faust acks (and later commits) the events only after this returns. On every partition assignment the consumer
seeks each partition to the offset after the one the store has applied (`StoreSeekingConsumer`), or to where
Kafka's log now starts if retention deleted messages never applied (reported: `ldpstream.runtime.offsets`), so Kafka's
committed offsets are never trusted: a batch is counted once whatever faust committed.

A store that went back in time is also noticed without a batch to find it (a partition that gets no more messages):
every `STORE_CHECK_S` the worker compares the store's applied offsets with those it applied itself
(`BatchHandler.check_store`) and has the partitions behind read again.

Only one agent instance runs per worker process (concurrency 1): faust commits offsets past in-flight events
when an agent's concurrency is > 1. Scale out with more worker processes in the same consumer group.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import faust
import redis
from confluent_kafka import KafkaException, TopicPartition
from faust.tables import TableManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from ldpstream.aggregator.dedupe import CONFLICT, SeenDevices
from ldpstream.aggregator.health import HEARTBEAT_S, WorkerRegistry, worker_id
from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.processing import PartitionProcessor
from ldpstream.aggregator.quarantine import QUARANTINE_AFTER, CrashMarks, Marks, MemoryCrashMarks, RedisCrashMarks
from ldpstream.aggregator.store import NOT_APPLIED, RedisStore, StatsStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.topics import collection_of, is_report_topic, source, source_partition, source_topic
from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS
from ldpstream.runtime import metrics
from ldpstream.runtime.access import READER_GROUP, aiokafka_auth, kafka_security
from ldpstream.runtime.dlq import DeadLetter, DeadLetterProducer, DeliveryTimeout, Message
from ldpstream.runtime.kafka import consumer_client, existing_topics
from ldpstream.runtime.offsets import resume_offset
from ldpstream.runtime.redis import OUTAGES as REDIS_OUTAGES
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import specs_topic
from ldpstream.runtime.supervisor import STOP_GRACE_S, exit_within

log = logging.getLogger(__name__)

MAX_APPLY_ROUNDS = 32  # each round drops messages others applied, or reloads after their writes
# Events per micro-batch: large enough that each batch's fixed costs (the Redis script, the numpy set-up) are small
# next to faust's per-message cost for one-report messages (500 gave 0.70 of the do-nothing agent's rate, 2000 gave
# 0.93-1.02; benchmarks/bench_pipeline.py); `within_s` bounds the wait for a partial batch.
DEFAULT_MAX_MESSAGES = 2000
# A store write covers at most this many message bytes (about 100k reports of batched envelopes at ~26 bytes per
# report) and about BATCH_BUDGET_S of work at the rate measured so far: a report waits for the work ahead of it
# in its micro-batch, not for the whole micro-batch (2000 envelopes of 1000 reports are ~1 s of work).
DEFAULT_MAX_BATCH_BYTES = 2_500_000
MIN_BATCH_BYTES = 64_000
BATCH_BUDGET_S = 0.05
# set when the worker stops to resubscribe; `python -m ldpstream.aggregator` then re-executes
RESTART = threading.Event()
EXIT_CRASHED = 70  # the exit status of a worker that met an unexpected exception (its supervisor restarts it)
OUTAGE_RETRY_S = 0.5
MAX_OUTAGE_S = 300.0
SPEC_POLL_S = 5.0
# A worker that dies without leaving its consumer group (SIGKILL, a crash exit) holds its partitions until the
# group's session times out: faust's default of 60 s made every crash a minute of stall; 10 s is the broker's
# allowed range (group.min.session.timeout.ms = 6 s) with heartbeats every 2.5 s.
SESSION_TIMEOUT_S = 10.0
FETCH_MAX_WAIT_MS = 20  # the longest a fetch waits for data (`PromptFetchThread`)
OUTAGES = (*REDIS_OUTAGES, DeliveryTimeout)
STORE_CHECK_S = 5.0  # how often a worker compares the store's applied offsets with those it applied


class Contended(RuntimeError):
    """A store write kept being refused because other workers kept writing the same partitions."""


def restart_worker(reason: str) -> None:
    """Stop this worker cleanly (as on SIGTERM: the batch in hand is applied whole or not at all) and have `python -m
    ldpstream.aggregator` execute it afresh; the new process seeks every partition it is assigned to the store's applied
    offset + 1 (`StoreSeekingConsumer`)."""
    if not RESTART.is_set():
        log.warning("%s: restarting the worker", reason)
        RESTART.set()
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one aggregator worker process."""

    bootstrap: str
    redis_url: str
    group: str = "ldp-aggregator"
    max_messages: int = DEFAULT_MAX_MESSAGES
    within_s: float = 0.05  # the longest a partial micro-batch waits (0.1 s: p99 freshness 0.70 s at half load)
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_skew_ms: int = MAX_FUTURE_SKEW_MS  # how far ahead of this worker's clock a report's time may be


class ByteRate:
    """An exponentially weighted estimate of the message bytes a worker handles per second."""

    def __init__(self, initial: float = 50e6, weight: float = 0.2) -> None:
        self.bytes_per_s = initial
        self.weight = weight

    def observe(self, size: int, seconds: float) -> None:
        if size >= MIN_BATCH_BYTES and seconds > 0:
            self.bytes_per_s += self.weight * (size / seconds - self.bytes_per_s)


def write_units(messages: list[Message], limit: int) -> Iterator[list[Message]]:
    """Consecutive runs of `messages` of at most `limit` value bytes each (a larger message alone).

    Examples
    --------
    >>> units = write_units([Message(o, b"x" * n) for o, n in enumerate([3, 3, 5, 1])], 6)
    >>> [[m.offset for m in unit] for unit in units]
    [[0, 1], [2, 3]]
    """
    unit: list[Message] = []
    size = 0
    for m in messages:
        if unit and size + len(m.value) > limit:
            yield unit
            unit, size = [], 0
        unit.append(m)
        size += len(m.value)
    if unit:
        yield unit


class BatchHandler:
    """Steps 1-3 for the events of one micro-batch, run in faust's event loop.

    Not in a thread: the handler is CPU-bound Python, and in a thread it fights faust's loop for the GIL (the
    loop waits up to a switch interval after every select), which cost a third of the single-report message rate.
    faust's Kafka consumer runs in a thread of its own, so fetching and heartbeats go on meanwhile.
    """

    def __init__(self, store: StatsStore, plans: PlanRegistry, dlq: DeadLetterProducer,
                 seen: SeenDevices | None = None, marks: CrashMarks | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, exit: Callable[[int], None] = os._exit,
                 reread: Callable[[str], None] = restart_worker, max_skew_ms: int = MAX_FUTURE_SKEW_MS) -> None:
        self.store = store
        self.dlq = dlq
        self.seen = seen if seen is not None else SeenDevices(store)
        self.marks = marks
        self.suspects: dict[str, Marks] = {}  # per topic, loaded on every partition assignment
        self.max_batch_bytes = max_batch_bytes
        self.rate = ByteRate()
        self.exit = exit
        self.applied = 0  # store writes applied by this process (its heartbeat shows them)
        self.processor = PartitionProcessor(plans.get, now_ms, max_skew_ms)
        # How partitions whose store went back in time get read again from its applied offset + 1 (called with the
        # reason), and those partitions: their messages are dropped until then.
        #
        # A clean restart of the worker process, not a seek back in this process. faust keeps already fetched
        # events of a partition in several places (the consumer thread's fetch buffers, the conductor's channel,
        # take_events' buffer); after a seek back they still arrive ahead of the re-read ones, and faust's own
        # bookkeeping (the read offset below which it drops messages, the acked-offset gaps it commits from) is not
        # made to move backwards. A new process has no buffers and runs the one seek path there is
        # (`StoreSeekingConsumer`, on every assignment). Recovery costs a stop, an exec and a rejoin of the
        # consumer group (measured: docs/explanation/architecture.md), and a store going back in time is rare.
        self.reread = reread
        self.rereading: set[tuple[str, int]] = set()
        # per (topic, partition): the offset after the last message taken (the seek position at an assignment), where
        # the next batch's range starts even if its first message lies beyond it (`PartitionProcessor.process`)
        self.continues: dict[tuple[str, int], int] = {}

    def on_assigned(self, topic: str, applied: Mapping[int, int], positions: Mapping[int, int]) -> None:
        """Note where each assigned partition of a topic is read from (`positions`), and load the crash counts of its
        messages above the applied offsets (`ldpstream.aggregator.quarantine`)."""
        self.continues.update(((topic, p), position) for p, position in positions.items())
        if self.marks is not None:
            self.suspects[topic] = self.marks.load(collection_of(topic), applied)

    async def handle(self, events: Sequence[Any]) -> None:
        """Handle a micro-batch's events, topic by topic, in store writes of bounded size; messages that were in
        hand at a crash are handled alone, or quarantined (`ldpstream.aggregator.quarantine`)."""
        by_topic: dict[str, dict[tuple[int, int], Message]] = defaultdict(dict)
        for event in events:
            m = event.message
            # After a seek back (rebalance), faust's buffer can hold an offset twice: keep one of each.
            key = (m.partition, m.offset)
            produced_ms = None if m.timestamp is None else int(m.timestamp * 1000)  # faust's: seconds
            by_topic[m.topic].setdefault(key, Message(m.offset, m.value, produced_ms, m.partition))
        for topic, messages in by_topic.items():
            suspects = self.suspects.get(topic, {})
            run: list[Message] = []
            for key in sorted(messages):  # each partition in offset order: a suspect alone, the others in units
                count = suspects.pop(key, 0)
                if not count:
                    run.append(messages[key])
                    continue
                for unit in write_units(run, self.unit_bytes()):
                    await self.guarded(topic, unit)
                run = []
                await self.guarded(topic, [messages[key]], {key} if count >= QUARANTINE_AFTER else set())
            for unit in write_units(run, self.unit_bytes()):
                await self.guarded(topic, unit)

    def unit_bytes(self) -> int:
        """The message bytes of the next store write: BATCH_BUDGET_S of work, within [MIN, max_batch_bytes]."""
        return int(min(self.max_batch_bytes, max(MIN_BATCH_BYTES, self.rate.bytes_per_s * BATCH_BUDGET_S)))

    async def guarded(self, topic: str, messages: list[Message], quarantined: Collection[tuple[int, int]] = ()) -> None:
        """Handle one store write's messages; on an unexpected exception record them as in hand at a crash and
        exit non-zero, so the supervisor restarts the worker (never a live process that does nothing)."""
        try:
            await self.with_retries(topic, messages, quarantined)
        except OUTAGES:
            log.exception("%s: Redis or Kafka unreachable for %.0f s; exiting", topic, MAX_OUTAGE_S)
            self.exit(EXIT_CRASHED)
        except Contended:  # no fault of the messages in hand: they are not marked (a rebalance sets nothing aside)
            log.exception("%s: exiting to start afresh from the store's applied offsets", topic)
            self.exit(EXIT_CRASHED)
        except Exception:
            log.exception("%s: unexpected exception with %d message(s) in hand (partitions/offsets %s); recording "
                          "them and exiting", topic, len(messages), [(m.partition, m.offset) for m in messages[:10]])
            if self.marks is not None:
                try:
                    self.marks.record(collection_of(topic), [(m.partition, m.offset) for m in messages])
                except Exception:
                    log.exception("cannot record the messages in hand")
            self.exit(EXIT_CRASHED)

    async def with_retries(self, topic: str, messages: list[Message],
                           quarantined: Collection[tuple[int, int]] = ()) -> None:
        """Handle a topic's micro-batch, waiting out a Redis or Kafka outage (bounded) with the loop free: the batch
        is not acked meanwhile, and each attempt is all-or-nothing, so nothing is lost or counted twice."""
        deadline = time.monotonic() + MAX_OUTAGE_S
        while True:
            try:
                return self.handle_topic(topic, messages, quarantined)
            except OUTAGES as exc:
                if time.monotonic() > deadline:
                    raise
                metrics.OUTAGE_RETRIES.inc()
                log.warning("%s: %s; retrying in %.1f s", topic, exc, OUTAGE_RETRY_S)
                await asyncio.sleep(OUTAGE_RETRY_S)

    def handle_topic(self, topic: str, messages: list[Message], quarantined: Collection[tuple[int, int]] = ()) -> None:
        """Steps 1-3 for the messages of one topic (any of its partitions), in one atomic store write."""
        started = time.perf_counter()
        collection = collection_of(topic)
        size = sum(len(m.value) for m in messages)
        sent: set[tuple[int, int, str, tuple[int, ...] | None]] = set()
        if self.rereading:
            messages = [m for m in messages if (topic, m.partition) not in self.rereading]
        for _ in range(MAX_APPLY_ROUNDS):
            messages = self._unapplied(topic, messages)
            if not messages:
                metrics.BATCHES.labels("skipped").inc()
                return
            result = self.processor.process(topic, messages, self.seen, quarantined,
                                            {p: o for (t, p), o in self.continues.items() if t == topic})
            torn = [source_partition(r.source) for r in (result.update.ranges if result.update else ())
                    if r.expected == CONFLICT]
            if torn:  # lists loaded at different offsets (another worker wrote meanwhile): the store would refuse the
                self.seen.invalidate(topic, torn)  # write, and its dead letters could be wrong; reload, go round
                continue
            new = [d for d in result.dead_letters if (d.partition, d.offset, d.reason, d.rows) not in sent]
            self.dlq.send(topic, new)
            sent.update((d.partition, d.offset, d.reason, d.rows) for d in new)
            outcome = self.store.apply(result.update) if result.update else None
            status = outcome.status if outcome else "skipped"
            metrics.BATCHES.labels(status).inc()
            if status in ("applied", "skipped"):
                for m in messages:
                    key = (topic, m.partition)
                    self.continues[key] = max(self.continues.get(key, 0), m.offset + 1)
            if status == "applied" and result.update:
                self.seen.commit(topic, result.update, now_ms())
                self._count(collection, result.update.outcomes, result.dead_letters)
                elapsed = time.perf_counter() - started
                metrics.BATCH_SECONDS.observe(elapsed)
                self.rate.observe(size, elapsed)
                self.applied += 1
                return
            if status == "skipped":  # applied before, maybe by another worker: this worker's lists may be behind
                self.seen.invalidate(topic, sorted({m.partition for m in messages}))
                return
            assert outcome is not None
            self.seen.invalidate(topic, [source_partition(name) for name in outcome.applied])
            if status == "overlap":  # some partitions' messages are applied already (a replay, or the writes of
                # another worker reading the partition): drop them, and start those partitions' next range after the
                # applied offset (from where this worker last read, it overlapped again, round after round)
                for name, offset in outcome.applied.items():
                    key = (topic, source_partition(name))
                    self.continues[key] = max(self.continues.get(key, 0), offset + 1)
                messages = [m for m in messages if m.offset > outcome.applied.get(source(topic, m.partition), -1)]
            if status == "gap":  # the store went back in time: read these partitions again from applied + 1
                firsts = {m.partition: m.offset for m in reversed(messages)}  # each partition's lowest
                self._reread(topic, outcome.applied, {p: f"batch from {o}" for p, o in firsts.items()})
                messages = [m for m in messages if (topic, m.partition) not in self.rereading]
        raise Contended(f"{topic}: micro-batch not applied after {MAX_APPLY_ROUNDS} rounds: other workers keep "
                        f"writing its partitions")

    def _unapplied(self, topic: str, messages: list[Message]) -> list[Message]:
        """The messages beyond the offset each partition's dedupe lists were synced at (applied already, by this
        worker or another reading the partition too: deduplicated against lists that hold their own devices, they
        would be dead-lettered as duplicates before the store refused them as an overlap)."""
        floor = {p: self.seen.synced(topic, p) for p in {m.partition for m in messages}}
        if all(m.offset > floor[m.partition] for m in messages):
            return messages
        for p, offset in floor.items():
            self.continues[(topic, p)] = max(self.continues.get((topic, p), 0), offset + 1)
        return [m for m in messages if m.offset > floor[m.partition]]

    def check_store(self) -> None:
        """Notice a store that went back in time without a batch to find it (a partition that receives nothing
        more): a partition this worker applied up to some offset, whose applied offset in the store is now lower,
        is read again as after a `gap`. (Only this worker moves the partition's lists; the store's offset of a
        partition moves forward in every other case.)"""
        stored: dict[str, dict[str, int]] = {}
        behind: dict[str, dict[int, int]] = defaultdict(dict)
        for (topic, partition), synced in self.seen.applied().items():
            collection = collection_of(topic)
            if collection not in stored:
                stored[collection] = self.store.offsets(collection)
            if (topic, partition) not in self.rereading and (
                    stored[collection].get(source(topic, partition), NOT_APPLIED) < synced):
                behind[topic][partition] = synced
        for topic, synced_at in behind.items():
            self.seen.invalidate(topic, list(synced_at))
            applied = {source(topic, p): stored[collection_of(topic)].get(source(topic, p), NOT_APPLIED)
                       for p in synced_at}
            self._reread(topic, applied, {p: f"this worker applied up to {o}" for p, o in synced_at.items()})

    def _reread(self, topic: str, applied: Mapping[str, int], instead: Mapping[int, str]) -> None:
        """Have the partitions of `applied` read again from their applied offset + 1 (`instead`: what this worker
        has seen of each instead); drop their messages meanwhile."""
        log.warning("the store went back in time (it lost writes it had acknowledged): %s", ", ".join(
            f"{name} applied {offset}, {instead[source_partition(name)]}" for name, offset in sorted(applied.items())))
        self.rereading.update((topic, source_partition(name)) for name in applied)
        self.reread(f"re-read from the store's applied offset + 1: {', '.join(sorted(applied))}")

    @staticmethod
    def _count(collection: str, outcomes: Mapping[str, int], letters: list[DeadLetter]) -> None:
        for key, n in outcomes.items():
            outcome, _, reason = key.partition(":")
            metrics.REPORTS.labels(collection, outcome, reason).inc(n)
        metrics.DEAD_LETTERS.inc(len(letters))


class PromptFetchThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's aiokafka consumer thread with fetches that wait at most FETCH_MAX_WAIT_MS for data.

    faust hard-codes aiokafka's fetch_max_wait_ms at 1500. aiokafka keeps one fetch in flight per broker, and a
    partition whose buffered records were just consumed is fetched again only after that fetch returns; when the
    in-flight fetch names only partitions with nothing new, it waits out the full 1.5 s. With every partition on
    one broker, a steady stream then arrives in bursts 1.5 s apart: one worker could not keep up with half its
    maximum load (424k of 490k reports/s applied, p99 freshness 2.2 s; benchmarks/bench_pipeline.py)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # read when the consumer starts its fetcher
        # the shuffler writes in transactions: never count what it aborted (aiokafka's default reads it)
        consumer._isolation_level = "read_committed"
        return consumer


class StoreSeekingConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, but every seek-to-committed goes to the offset after the store's applied one (and
    the worker's dedupe lists are dropped, to be reloaded for the partitions it now has; the crash counts of the
    messages ahead are loaded)."""

    store: StatsStore
    seen: SeenDevices
    handler: BatchHandler

    def _new_consumer_thread(self) -> PromptFetchThread:
        return PromptFetchThread(self, loop=self.loop, beacon=self.beacon)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = dict(await super().seek_to_committed())
        self.seen.clear()
        reports = [tp for tp in self.assignment() if is_report_topic(tp.topic)]
        log_starts = await self.earliest_offsets(*reports) if reports else {}
        applied: dict[str, dict[str, int]] = {}
        for tp in reports:
            collection = collection_of(tp.topic)
            if collection not in applied:
                applied[collection] = await self._applied_offsets(collection)
            name = source(tp.topic, tp.partition)
            last = applied[collection].get(name, NOT_APPLIED)
            position = resume_offset(tp.topic, tp.partition, last, log_starts[tp],
                                     partial(self.store.skip_lost, collection, name))
            await self._seek(tp, position)
            committed[tp] = position
            log.info("seek %s to %s (applied in store: %s, log start: %s)", name, position, last, log_starts[tp])
        for topic in {tp.topic for tp in self.assignment() if is_report_topic(tp.topic)}:
            offsets = applied[collection_of(topic)]
            self.handler.on_assigned(topic, {source_partition(s): o for s, o in offsets.items()
                                             if source_topic(s) == topic},
                                     {tp.partition: committed[tp] for tp in reports if tp.topic == topic})
        return committed

    async def _applied_offsets(self, collection: str) -> dict[str, int]:
        """The store's applied offsets, waiting out a Redis outage (bounded) instead of crashing the worker."""
        deadline = time.monotonic() + MAX_OUTAGE_S
        while True:
            try:
                return self.store.offsets(collection)
            except REDIS_OUTAGES:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(OUTAGE_RETRY_S)


class PublishedTopics:
    """The report topics of the published collections that exist in the cluster, read first at the worker's start
    (`wait_for_report_topics`) and again only when the specs topic has grown or a published collection's topic was
    still missing: a watermark request on one long-lived client instead of new clients, a read of the specs topic and
    a listing of the cluster's topics every SPEC_POLL_S. That read holds the GIL (YAML, signatures) for a quarter
    second with a few hundred specs: done first at the first tick, 5 s after the start, it stalled every batch of a
    worker under a steady stream for that long (p99 freshness 0.45 s at 10% load; benchmarks/bench_pipeline.py)."""

    def __init__(self, plans: PlanRegistry, bootstrap: str) -> None:
        self.plans, self.bootstrap = plans, bootstrap
        self.consumer = consumer_client(bootstrap, READER_GROUP)
        self.end: int | None = None
        self.topics: list[str] = []
        self.complete = False

    def __call__(self) -> list[str]:
        end = self.consumer.get_watermark_offsets(TopicPartition(specs_topic(), 0), timeout=10.0)[1]
        if end != self.end or not self.complete:
            published = {p.spec.topic for p in self.plans.plans()}
            existing = existing_topics(self.bootstrap)
            self.topics, self.complete, self.end = sorted(published & existing), published <= existing, end
        return self.topics


def wait_for_report_topics(published: PublishedTopics, poll_s: float = 2.0) -> list[str]:
    """Block until Kafka answers and at least one collection is published; its report topics. A worker started
    before Kafka (a supervisor starting everything at once, a broker restarting) waits for it, saying so."""
    while True:
        try:
            topics = published()
        except KafkaException as exc:
            log.warning("Kafka at %s is not answering (%s); waiting", published.bootstrap, exc.args[0].str())
        else:
            if topics:
                return topics
            log.warning("no collection is published yet (ldp spec publish FILE); waiting")
        time.sleep(poll_s)


def broker_credentials(settings: Settings) -> faust.auth.Credentials | None:
    """faust's (aiokafka's) form of this process's Kafka credentials (`ldpstream.runtime.access.kafka_security`)."""
    auth = aiokafka_auth(kafka_security(settings))
    protocol = auth.get("security_protocol", "PLAINTEXT")
    context = ssl.create_default_context(cafile=auth.get("cafile")) if protocol.endswith("SSL") else None
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(username=auth.get("username"), password=auth.get("password"),
                                     mechanism=auth.get("sasl_mechanism", "PLAIN"), ssl_context=context)
    return faust.SSLCredentials(context) if context is not None else None


class BoundedStopWorker(faust.Worker):
    """faust's worker, whose stop on SIGTERM/SIGINT ends within STOP_GRACE_S whatever it waits for: with Kafka and
    Redis gone, faust's clean stop (commit, leave the group, flush) waited on them for over 25 s. Safe: each store
    write is one atomic script, so the batch in hand is applied whole or not at all (`ldpstream.runtime.supervisor`).
    """

    def _on_sigterm(self) -> None:
        exit_within(STOP_GRACE_S, 0 if RESTART.is_set() else 1)
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        exit_within(STOP_GRACE_S)
        super()._on_sigint()


class TablelessManager(TableManager):
    """faust's table manager without the second it sleeps when it starts, there for apps whose tables are still
    being declared: this app declares none, and every start, re-exec and restart of a worker waited it."""

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


def build_app(cfg: WorkerConfig, store: StatsStore | None = None) -> faust.App:
    """The faust app of one worker process."""
    settings = Settings.from_env()
    state = settings.state_dir / "faust"
    state.mkdir(parents=True, exist_ok=True)
    app = faust.App(cfg.group, broker=[f"kafka://{b.strip()}" for b in cfg.bootstrap.split(",")], store="memory://",
                    web_enabled=False, topic_replication_factor=settings.kafka_replication or 1,
                    broker_credentials=broker_credentials(settings),
                    datadir=str(state / cfg.group), consumer_auto_offset_reset="earliest", topic_partitions=8,
                    stream_buffer_maxsize=max(4096, 4 * cfg.max_messages), broker_commit_every=cfg.max_messages,
                    consumer_max_fetch_size=8 * 1024 * 1024, broker_session_timeout=SESSION_TIMEOUT_S,
                    broker_heartbeat_interval=SESSION_TIMEOUT_S / 4, TableManager=TablelessManager,
                    Worker=BoundedStopWorker)
    store = store or RedisStore(cfg.redis_url)
    seen = SeenDevices(store)
    marks = RedisCrashMarks(store.redis) if isinstance(store, RedisStore) else MemoryCrashMarks()
    plans = PlanRegistry(cfg.bootstrap)
    handler = BatchHandler(store, plans, DeadLetterProducer(cfg.bootstrap), seen, marks, cfg.max_batch_bytes,
                           max_skew_ms=cfg.max_skew_ms)
    consumer_cls = type("BoundStoreSeekingConsumer", (StoreSeekingConsumer,),
                        {"store": store, "seen": seen, "handler": handler})
    transport_cls = type("StoreSeekingTransport", (faust_aiokafka.Transport,), {"Consumer": consumer_cls})
    app.transport = transport_cls(app.conf.broker_consumer, app)
    # faust's aiokafka driver cannot subscribe to a pattern, and changing a running subscription races in its
    # fetcher; so a worker subscribes to the report topics of the collections published when it starts, and when
    # another is published it stops cleanly (like SIGTERM) and `python -m ldpstream.aggregator` starts it again
    # (re-exec).
    published_topics = PublishedTopics(plans, cfg.bootstrap)
    topics = wait_for_report_topics(published_topics)
    reports = app.topic(*topics, value_type=bytes, value_serializer="raw", key_serializer="raw")

    @app.timer(SPEC_POLL_S)
    async def follow_published_collections() -> None:
        try:
            # in a thread: reading the specs topic and the cluster's topics must not stall the loop's batches
            new = sorted(set(await asyncio.to_thread(published_topics)) - set(topics))
        except KafkaException as exc:  # Kafka unreachable: look again at the next tick
            log.warning("cannot list published collections: %s", exc)
            return
        if new:
            restart_worker(f"newly published collections {new}: subscribing")

    @app.timer(STORE_CHECK_S)
    async def notice_a_store_gone_back() -> None:
        try:
            handler.check_store()
        except REDIS_OUTAGES as exc:  # Redis unreachable: look at the next tick
            log.warning("cannot compare the store's applied offsets: %s", exc)

    @app.agent(reports, concurrency=1)
    async def aggregate(stream: faust.StreamT) -> None:  # type: ignore[type-arg]
        try:
            async for events in stream.take_events(cfg.max_messages, within=cfg.within_s):  # type: ignore[attr-defined]
                await handler.handle(events)  # one batch at a time, acked only after it returns
        except Exception:  # faust would keep a process whose agent is dead: exit so the supervisor restarts it
            log.exception("the aggregating agent failed; exiting")
            handler.exit(EXIT_CRASHED)

    if isinstance(store, RedisStore):
        registry = WorkerRegistry(store.redis)
        me, started_ms = worker_id(), now_ms()

        @app.timer(HEARTBEAT_S)
        async def heartbeat() -> None:
            info = {"group": cfg.group, "pid": os.getpid(), "started_ms": started_ms, "beat_ms": now_ms(),
                    "applied_batches": handler.applied, "topics": topics}
            try:
                await asyncio.to_thread(registry.beat, me, info)
            except redis.RedisError as exc:
                log.warning("heartbeat not recorded: %s", exc)

    return app
