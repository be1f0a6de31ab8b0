"""Kafka clients, built in one place: producers, consumers and admin clients, topic creation and reads.

Every confluent-kafka client of the project comes from `producer_client`, `consumer_client` or `admin_client`, so that
connection settings and credentials (`ldpstream.runtime.access.kafka_security`: this process's principal) are decided
once. `ReportProducer` is the idempotent, acks=all, batching producer with delivery counts; `flush` raises
`DeliveryError` if anything was not delivered.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ldpstream.runtime.access import READER_GROUP, kafka_security
from ldpstream.runtime.settings import Settings

COMPRESSIONS = ("lz4", "zstd", "none")  # preference order: lz4 is the cheapest on CPU
ADMIN_TIMEOUT_S = 30.0
QUIET = 4  # librdkafka log level: warnings and worse
# librdkafka's own log lines go to this logger (its syslog levels as logging's), never straight to the terminal: the
# services log them with their name, the command line keeps them quiet unless --debug (`ldpstream.cli.errors`)
CLIENT_LOG = logging.getLogger("ldpstream.kafka.client")
# a principal without the right to create a topic may still use an existing one
NOT_ALLOWED = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)

Headers = tuple[tuple[str, bytes | None], ...]  # a message's headers: (name, value) pairs


class DeliveryError(RuntimeError):
    """Messages were not delivered (failed, or still queued when the flush timed out)."""


class TopicError(RuntimeError):
    """A topic could not be created or read."""


def client_config(bootstrap: str, principal: str | None = None, **overrides: Any) -> dict[str, Any]:
    """The settings every client starts from: the bootstrap servers, the credentials of `principal` (default: this
    process's), then `overrides`."""
    return {"bootstrap.servers": bootstrap, "logger": CLIENT_LOG, **kafka_security(Settings.from_env(), principal),
            **overrides}


def producer_client(bootstrap: str, principal: str | None = None, **overrides: Any) -> Producer:
    """An idempotent, acks=all producer (no duplicates from its retries; nothing acknowledged before every in-sync
    replica has it) with `overrides` on top; ValueError for an invalid configuration."""
    config = client_config(bootstrap, principal, **{"enable.idempotence": True, "acks": "all", **overrides})
    try:
        return Producer(config)
    except KafkaException as exc:
        raise ValueError(f"invalid Kafka producer configuration: {exc.args[0]}") from exc


def consumer_client(bootstrap: str, group: str, principal: str | None = None, **overrides: Any) -> Consumer:
    """A consumer in `group` that never commits by itself (offsets are the stores' business)."""
    return Consumer(client_config(bootstrap, principal,
                                  **{"group.id": group, "enable.auto.commit": False, **overrides}))


def admin_client(bootstrap: str, principal: str | None = None, **overrides: Any) -> AdminClient:
    """An admin client that logs warnings and worse."""
    return AdminClient(client_config(bootstrap, principal, **{"log_level": QUIET, **overrides}))


@dataclass
class DeliveryCounts:
    """Deliveries acknowledged and failed so far, with the first few failure reasons."""

    delivered: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if len(self.errors) < 10:
            self.errors.append(str(err))


class ReportProducer:
    """An idempotent, acks=all, batching Kafka producer that counts delivered and failed messages."""

    def __init__(self, bootstrap: str, *, linger_ms: float = 10.0, batch_bytes: int = 1_000_000,
                 compression: str = "lz4", extra: dict[str, Any] | None = None, principal: str | None = None) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
        self.counts = DeliveryCounts()
        self.sent = 0
        self._producer = producer_client(bootstrap, principal, **{
            "linger.ms": linger_ms, "batch.size": batch_bytes, "compression.type": compression,
            "queue.buffering.max.messages": 1_000_000, "on_delivery": self.counts.on_delivery, **(extra or {})})

    @property
    def delivered(self) -> int:
        return self.counts.delivered

    @property
    def failed(self) -> int:
        return self.counts.failed

    def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None,
                headers: Headers = ()) -> None:
        """Queue one message (to `partition`, else where the key hashes) with `headers`; when the local queue is
        full, serve delivery reports until there is room."""
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        if headers:
            extra["headers"] = list(headers)  # only when there are some: passing any doubles the call's cost
        while True:
            try:
                self._producer.produce(topic, value, key, **extra)
                break
            except BufferError:
                self._producer.poll(0.05)
        self.sent += 1
        self._producer.poll(0)

    def poll(self, timeout_s: float = 0.0) -> int:
        """Serve delivery callbacks; return how many were served."""
        return self._producer.poll(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued message is acknowledged; DeliveryError if any failed or the timeout passed."""
        remaining = self._producer.flush(timeout_s)
        if remaining or self.counts.failed:
            raise DeliveryError(f"{self.counts.failed} message(s) failed and {remaining} still queued after "
                                f"{timeout_s:g} s (of {self.sent} sent); first errors: {self.counts.errors[:3]}")


def metadata_answers(bootstrap: str, timeout_s: float = 3.0, **overrides: Any) -> bool:
    """True if the cluster at `bootstrap` answers a metadata request (of a client with `overrides`)."""
    try:
        md = admin_client(bootstrap, **{"log_level": 0, **overrides}).list_topics(timeout=timeout_s)
    except Exception:
        return False
    return len(md.brokers) > 0


def ensure_topic(bootstrap: str, name: str, partitions: int, compacted: bool = False, exact: bool = True) -> bool:
    """Create the topic if it does not exist (idempotent); True if this call created it. It gets
    `Settings.kafka_replication` replicas (a cluster's 3, with min.insync.replicas 2), else the broker's default.

    An existing topic is left as it is; with `exact`, TopicError if it has a different number of partitions. A
    principal that may not create topics gets TopicError only if the topic does not exist.
    """
    config = {"cleanup.policy": "compact"} if compacted else {}
    replication = Settings.from_env().kafka_replication
    if replication is not None:  # min.insync.replicas = RF - 1: acks=all survives one replica down, not two
        config["min.insync.replicas"] = str(max(1, replication - 1))
    client = admin_client(bootstrap)  # must outlive the future
    futures = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication or -1,
                                              config=config)],
                                   operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
    try:
        futures[name].result()
        _wait_listed(client, name)
        return True
    except KafkaException as exc:
        code = exc.args[0].code()
        if code == KafkaError.INVALID_REPLICATION_FACTOR:
            raise TopicError(f"cannot create topic {name!r} with {replication or 'the default'} replicas: "
                             f"{exc.args[0].str()} (start the missing brokers, or set KAFKA_REPLICATION to what "
                             f"the cluster can hold)") from exc
        if code not in (KafkaError.TOPIC_ALREADY_EXISTS, *NOT_ALLOWED):
            raise TopicError(f"cannot create topic {name!r}: {exc.args[0].str()}") from exc
        if code in NOT_ALLOWED and name not in existing_topics(bootstrap):
            raise TopicError(f"topic {name!r} does not exist and this principal may not create it "
                             f"({exc.args[0].str()}): the admin creates it (`ldp up`, `ldp spec publish`)") from exc
    existing = topic_partitions(bootstrap, name)
    if exact and existing != partitions:
        raise TopicError(f"topic {name!r} exists with {existing} partitions, not {partitions}")
    return False


def _wait_listed(client: AdminClient, name: str) -> None:
    """Wait until the broker's metadata lists a topic just created (the controller answers when the creation is
    committed; a broker applies it a moment later, and a producer asking it before then is refused as if it had
    tried to create the topic: TOPIC_AUTHORIZATION_FAILED for a principal that may only write it)."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while name not in client.list_topics(timeout=ADMIN_TIMEOUT_S).topics:  # all topics: never auto-creates one
        if time.monotonic() > deadline:
            raise TopicError(f"topic {name!r} is not listed {ADMIN_TIMEOUT_S:g} s after its creation")
        time.sleep(0.05)


def delete_topic(bootstrap: str, name: str) -> None:
    """Delete a topic and wait until the cluster's metadata no longer lists it (benchmarks and tests clean up with
    it: a worker that starts meanwhile must not subscribe to a topic about to vanish, which crashes faust's
    fetcher); TopicError if the broker refuses or the topic is still listed after ADMIN_TIMEOUT_S."""
    client = admin_client(bootstrap)
    try:
        client.delete_topics([name], operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)[name].result()
    except KafkaException as exc:
        raise TopicError(f"cannot delete topic {name!r}: {exc.args[0].str()}") from exc
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while name in set(client.list_topics(timeout=ADMIN_TIMEOUT_S).topics):
        if time.monotonic() > deadline:
            raise TopicError(f"topic {name!r} is still listed {ADMIN_TIMEOUT_S:g} s after its deletion")
        time.sleep(0.1)


def topic_partitions(bootstrap: str, name: str) -> int:
    """The number of partitions of an existing topic; TopicError if it does not exist."""
    md = admin_client(bootstrap).list_topics(name, timeout=ADMIN_TIMEOUT_S).topics.get(name)
    if md is None or md.error is not None:
        raise TopicError(f"topic {name!r} does not exist: {md.error if md is not None else 'no metadata'}")
    return len(md.partitions)


def existing_topics(bootstrap: str, timeout_s: float = 10.0) -> set[str]:
    """The names of the cluster's topics (KafkaException if it does not answer)."""
    return set(admin_client(bootstrap).list_topics(timeout=timeout_s).topics)


def end_offsets(bootstrap: str, topic: str, group: str, timeout_s: float = 30.0) -> dict[int, int]:
    """The high watermark of every partition of a topic."""
    consumer = consumer_client(bootstrap, group)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in range(topic_partitions(bootstrap, topic))}
    finally:
        consumer.close()


class Record(NamedTuple):
    """A message read back: its key, value and headers (None when they cannot be decoded: `message_headers`)."""

    key: bytes | None
    value: bytes | None
    headers: Headers | None


_HEADERS = operator.methodcaller("headers")


def message_headers(msg: Message) -> Headers | None:
    """A consumed message's headers (empty if none); None if confluent-kafka cannot decode them.

    A header name that is not UTF-8 (any Kafka client can send one) makes confluent-kafka return a list holding a
    NULL with an exception set. Called as `msg.headers()`, CPython's specialised call instruction lets that list
    through (touching it crashes the process) and raises the exception later, elsewhere; called through
    `methodcaller`, a generic call, the result is checked and SystemError raised here. Asked again, the message
    returns the broken list: this asks once."""
    try:
        return tuple(_HEADERS(msg) or ())
    except SystemError:
        return None


def consume_arrived(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to `max_messages` messages: waits up to `timeout_s` for the first, then takes only those already fetched
    (`Consumer.consume` alone waits out the whole timeout whenever fewer than `max_messages` have come)."""
    first = consumer.consume(1, timeout_s)
    return first + consumer.consume(max_messages - 1, 0) if first and max_messages > 1 else first


def read_to_end(bootstrap: str, topic: str, timeout_s: float = 30.0) -> Iterator[Record]:
    """Every message of a topic from the beginning up to its end as of the call, in offset order per partition.

    Reads without a consumer group (partitions assigned directly, no offsets committed).
    """
    consumer = consumer_client(bootstrap, READER_GROUP, principal=None, **{"enable.partition.eof": True})
    try:
        partitions = range(topic_partitions(bootstrap, topic))
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TopicError(f"reading {topic!r} to its end took more than {timeout_s:g} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error, partition, offset = msg.error(), msg.partition() or 0, msg.offset() or 0
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                pending.discard(partition)  # compaction can leave the end offset without a message
                continue
            if error is not None:
                raise TopicError(f"reading {topic!r}: {error.str()}")
            if offset >= ends[partition] - 1:
                pending.discard(partition)
            if offset < ends[partition]:
                yield Record(msg.key(), msg.value(), message_headers(msg))
    finally:
        consumer.close()
