"""Checked reports -> columnar envelopes per (topic, partition) -> Kafka, or the spool; the acknowledgement rule.

The delivery guarantee, step by step:
1. `submit` puts the checked envelopes of requests in the pending list of their devices' partition; it refuses
   (503 `overloaded`) when the reports pending or in flight would exceed `max_in_flight` (memory stays bounded);
2. every `linger_s` the pending lists become one envelope per partition (`ldpstream.contract.wire.concatenate`, then
   `encode_envelope`: one message for many devices) and go to the idempotent, acks=all producer
   (`ldpstream.runtime.kafka.producer_client`);
3. when Kafka acknowledges a message, its requests are answered 200 (`kafka`); when its delivery fails (the broker
   is down past `delivery_timeout_ms`), the message is appended to the spool and fsynced, and its requests are
   answered 202 (`spool`); if the spool is full they are answered 507 and their window marks released;
4. while the spool holds anything, new messages go straight to it (after the ones before them), and a drainer
   produces the spool's segments oldest first once Kafka answers, removing each only when Kafka acknowledged all
   its records; then messages go to Kafka again.
What if the edge dies: before step 3 nothing was acknowledged (the device retries); after it, the report is in Kafka
or fsynced in the spool, which the restarted edge drains. A message whose delivery timed out may still have
reached Kafka and be spooled too: the aggregator counts a device once per window, so it is counted once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Message

from ldpstream.contract.topics import RAW_PREFIX
from ldpstream.contract.wire import Envelope, decode_envelope, encode_envelope, join_envelopes
from ldpstream.edge.intake import OVERLOADED, SPOOL_FULL, Refusal
from ldpstream.edge.spool import Record, Spool, SpoolFull, read_segment
from ldpstream.runtime.kafka import producer_client

log = logging.getLogger(__name__)
KAFKA, SPOOL = "kafka", "spool"


@dataclass
class _Pending:
    envelopes: list[Envelope] = field(default_factory=list)
    waiters: list[asyncio.Future[str]] = field(default_factory=list)


class Forwarder:
    """Batches checked envelopes per partition into Kafka messages; answers each request's future with where its
    reports are safe (`KAFKA` or `SPOOL`) or a Refusal (see the module docstring)."""

    def __init__(self, bootstrap: str, spool: Spool, *, linger_s: float = 0.005, max_in_flight: int = 200_000,
                 delivery_timeout_ms: int = 10_000, producer_config: dict[str, Any] | None = None) -> None:
        self.spool = spool
        self.linger_s = linger_s
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.kafka_up = True
        self._producer = producer_client(bootstrap, **{
            "linger.ms": 2, "compression.type": "lz4", "message.timeout.ms": delivery_timeout_ms,
            "queue.buffering.max.messages": 100_000, **(producer_config or {})})
        self._pending: dict[tuple[str, int, int], _Pending] = defaultdict(_Pending)  # topic, partition, version
        self._wake = asyncio.Event()
        self._mode = threading.Lock()  # spooling flag and spool order
        self.spooling = not spool.empty
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the batching task, the delivery-report thread and the spool drainer."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._batches())
        self._threads = [threading.Thread(target=self._poll, daemon=True, name="edge-deliveries"),
                         threading.Thread(target=self._drain, daemon=True, name="edge-drainer")]
        for thread in self._threads:
            thread.start()

    async def stop(self) -> None:
        """Stop after the messages in flight are delivered or spooled."""
        if self._task is not None:
            self._task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, 15.0)
        self._stop.set()
        for thread in self._threads:
            thread.join(5)

    def submit(self, topic: str, partition: int, envelopes: list[Envelope], rows: int) -> asyncio.Future[str]:
        """Step 1 for the reports of some requests to one partition (envelopes of one spec version): a future of
        where they are safe (`KAFKA` or `SPOOL`) or a Refusal; Refusal 503/507 at once when there is no room."""
        if self.in_flight + rows > self.max_in_flight:
            raise Refusal(503, OVERLOADED, "the edge has too many reports in flight; retry later")
        if self.spooling and self.spool.full:
            raise Refusal(507, SPOOL_FULL, "Kafka is unavailable and the spool is full; retry later")
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        pending = self._pending[(topic, partition, envelopes[0].spec_version)]
        pending.envelopes.extend(envelopes)
        pending.waiters.append(waiter)
        self.in_flight += rows
        waiter.add_done_callback(lambda _: self._done(rows))
        self._wake.set()
        return waiter

    def _done(self, rows: int) -> None:
        self.in_flight -= rows

    async def _batches(self) -> None:
        """Step 2, forever: the pending lists as one message per partition, every `linger_s`."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.linger_s)
            self._wake.clear()
            batches, self._pending = self._pending, defaultdict(_Pending)
            for (topic, partition, _), pending in batches.items():
                try:
                    value = _joined(pending.envelopes)
                except Exception as exc:  # noqa: BLE001 - checked envelopes always join; never leave a waiter hanging
                    log.exception("cannot batch %d envelopes", len(pending.envelopes))
                    _settle(pending.waiters, Refusal(503, OVERLOADED, f"cannot batch: {exc}"))
                    continue
                self._dispatch((topic, partition, value), pending.waiters)

    def _dispatch(self, record: Record, waiters: list[asyncio.Future[str]]) -> None:
        """Step 3/4: produce the message, or spool it while the spool is in use."""
        with self._mode:
            if not self.spooling:
                self._producer.produce(record[0], record[2], partition=record[1], timestamp=message_time(record),
                                       on_delivery=lambda err, msg: self._delivered(err, msg, record, waiters))
                return
        assert self._loop is not None
        self._loop.run_in_executor(None, self._to_spool, record, waiters)

    def _delivered(self, err: KafkaError | None, _msg: Message, record: Record,
                   waiters: list[asyncio.Future[str]]) -> None:
        """Delivery report (poll thread): acknowledge, or spool what Kafka did not take."""
        if err is None:
            self._answer(waiters, KAFKA)
            return
        log.warning("delivery to %s[%d] failed (%s): spooling", record[0], record[1], err)
        with self._mode:
            self.spooling = True
            self.kafka_up = False
        self._to_spool(record, waiters)

    def _to_spool(self, record: Record, waiters: list[asyncio.Future[str]]) -> None:
        with self._mode:
            try:
                self.spool.append([record])
            except (SpoolFull, OSError) as exc:
                log.error("not spooled: %s", exc)
                self._answer(waiters, Refusal(507, SPOOL_FULL, "Kafka is unavailable and the spool is full"))
                return
        self._answer(waiters, SPOOL)

    def _answer(self, waiters: list[asyncio.Future[str]], outcome: str | Refusal) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_settle, waiters, outcome)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def _kafka_answers(self) -> bool:
        """Whether the cluster answers a metadata request (over the producer's own connections)."""
        try:
            return len(self._producer.list_topics(timeout=2.0).brokers) > 0
        except KafkaException:
            return False

    def _drain(self) -> None:
        """Every second: whether Kafka answers (readiness); step 4: produce the spool's segments, oldest first,
        whenever it does; then leave spool mode."""
        while not self._stop.wait(1.0):
            self.kafka_up = self._kafka_answers()
            if not self.spooling or not self.kafka_up:
                continue
            self.spool.rotate()
            for segment in self.spool.closed_segments():
                if not self._produce_all(read_segment(segment)):
                    break
                self.spool.remove(segment)
            with self._mode:
                if self.spool.empty:
                    self.spooling = False
                    log.warning("spool drained: forwarding to Kafka again")

    def _produce_all(self, records: list[Record]) -> bool:
        """Produce records and wait for every acknowledgement; False if any failed."""
        failed: list[KafkaError] = []
        for record in records:
            self._producer.produce(record[0], record[2], partition=record[1], timestamp=message_time(record),
                                   on_delivery=lambda err, _m: failed.append(err) if err is not None else None)
        remaining = self._producer.flush(30.0)
        if failed or remaining:
            log.warning("draining the spool: %d failed, %d unacknowledged; retrying later", len(failed), remaining)
            return False
        return True


def message_time(record: Record) -> int:
    """The Kafka timestamp of a message: for the shuffler's raw topics the earliest window start of its reports (the
    time it arrived is not written: only the window), else 0 (the producer's clock)."""
    if not record[0].startswith(RAW_PREFIX):
        return 0
    times = np.frombuffer(decode_envelope(record[2]).timestamps, dtype="<i8")
    return int(times.min()) if len(times) else 0


def _joined(envelopes: list[Envelope]) -> bytes:
    """One message holding the reports of checked envelopes of one collection and spec version."""
    return encode_envelope(join_envelopes(envelopes))


def _settle(waiters: list[asyncio.Future[str]], outcome: str | Refusal) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if isinstance(outcome, Refusal):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)

