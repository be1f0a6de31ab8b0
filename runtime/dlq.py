"""Messages as consumers see them, the dead letters they reject, and the dead-letter topic `ldp.dlq` that keeps
each rejected message (or its rejected rows) with the reason, as headers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from collection.topics import DLQ_TOPIC
from runtime.kafka import producer_client

DLQ_PARTITIONS = 1  # when a call creates the topic; an existing one is used as it is
# A dead letter keeps at most this many bytes of the original message (with its length and sha256 in headers), so
# that a rejected message near Kafka's 1 MiB limit cannot itself be refused by the dead-letter topic.
MAX_DEAD_LETTER_BYTES = 512 * 1024


@dataclass(frozen=True)
class Message:
    """A Kafka message as a consumer's pure processing sees it."""

    offset: int
    value: bytes
    timestamp_ms: int | None = None
    partition: int = 0


@dataclass(frozen=True)
class DeadLetter:
    """A rejected message (rows None) or the rejected device rows of a message, with the reason."""

    offset: int
    value: bytes
    reason: str
    detail: str
    rows: tuple[int, ...] | None = None
    partition: int = 0


class DeliveryTimeout(RuntimeError):
    """Dead letters were not acknowledged by Kafka in time (the batch is retried, not applied)."""


class DeadLetterProducer:
    """Sends dead letters: value = the original message bytes (cut at MAX_DEAD_LETTER_BYTES, with its length and
    sha256 in headers); headers = reason, detail, source, offset, rows."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = producer_client(bootstrap, **{"linger.ms": 20, "compression.type": "lz4"})
        self.failed = 0

    def send(self, topic: str, letters: list[DeadLetter], timeout_s: float = 30.0) -> None:
        """Send and wait until Kafka has them (so they are recorded before the batch counts as applied)."""
        if not letters:
            return
        for d in letters:
            headers = {"reason": d.reason, "detail": d.detail, "source_topic": topic,
                       "source_partition": str(d.partition), "source_offset": str(d.offset)}
            if d.rows is not None:
                headers["rows"] = json.dumps(list(d.rows))
            value = d.value
            if len(value) > MAX_DEAD_LETTER_BYTES:
                headers |= {"original_bytes": str(len(value)), "original_sha256": hashlib.sha256(value).hexdigest()}
                value = value[:MAX_DEAD_LETTER_BYTES]
            self._producer.produce(DLQ_TOPIC, value, key=f"{topic}:{d.partition}:{d.offset}".encode(),
                                   headers=list(headers.items()), on_delivery=self._on_delivery)
        failed_before = self.failed
        remaining = self._producer.flush(timeout_s)
        if remaining or self.failed > failed_before:
            lost = remaining + self.failed - failed_before
            raise DeliveryTimeout(f"{lost} dead letters not delivered to {DLQ_TOPIC}")

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failed += 1
