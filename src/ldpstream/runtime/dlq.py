"""Messages as consumers see them, the dead letters they reject, and the dead-letter topic `ldp.dlq` that keeps
each rejected message (or its rejected rows) with the reason, as headers; and `isolating`, which keeps one
message that a batch step cannot handle from failing the others of its micro-batch."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from ldpstream.contract.topics import DLQ_TOPIC
from ldpstream.contract.untrusted import describe
from ldpstream.runtime.kafka import producer_client

P = ParamSpec("P")
R = TypeVar("R")

DLQ_PARTITIONS = 1  # when a call creates the topic; an existing one is used as it is
# A dead letter keeps at most this many bytes of the original message (with its length and sha256 in headers), so
# that a rejected message near Kafka's 1 MiB limit cannot itself be refused by the dead-letter topic.
MAX_DEAD_LETTER_BYTES = 512 * 1024


@dataclass(frozen=True)
class Message:
    """A Kafka message as a consumer's pure processing sees it."""

    offset: int
    value: bytes
    timestamp_ms: int | None = None  # its Kafka timestamp (the producer's clock), ms
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
    sha256 in headers); headers = reason, detail, source, offset, rows. To `ldp.dlq`, or to `topic` (the
    set-aside topic keeps reports a poisoning audit set aside in the same form)."""

    def __init__(self, bootstrap: str, topic: str = DLQ_TOPIC) -> None:
        self._producer = producer_client(bootstrap, principal=None, **{"linger.ms": 20, "compression.type": "lz4"})
        self.topic = topic
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
            self._producer.produce(self.topic, value, key=f"{topic}:{d.partition}:{d.offset}".encode(),
                                   headers=list(headers.items()), on_delivery=self._on_delivery)
        failed_before = self.failed
        remaining = self._producer.flush(timeout_s)
        if remaining or self.failed > failed_before:
            lost = remaining + self.failed - failed_before
            raise DeliveryTimeout(f"{lost} dead letters not delivered to {self.topic}")

    def _on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failed += 1


class LookupFailed(Exception):
    """The exception of a lookup that a batch step makes beyond its messages (the devices a partition counted, the
    jobs that exist: Redis), wrapped: no message's fault, so `isolating` raises the original (for the caller to
    wait out an outage) instead of blaming messages for it."""

    def __init__(self, original: Exception) -> None:
        super().__init__(describe(original))
        self.original = original


def lookup(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)`, for a batch step run by `isolating`: its exception is raised as `LookupFailed`."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise LookupFailed(exc) from exc


def isolating(step: Callable[[Sequence[Message]], R], messages: Sequence[Message],
              reason: str) -> tuple[R, list[DeadLetter]]:
    """`step(messages)` and no dead letters; or, if it raises, `step` of the messages left once those it cannot
    handle are taken out, and a dead letter (`reason`, the exception as detail) for each message taken out.

    Taken out: each message that `step` raises on alone; then, while `step` still raises on the rest (a failure
    that only some messages together cause), the message at which a prefix of the rest first raises (by
    bisection). So an unexpected exception costs the micro-batch the messages it comes from, never the batch.
    `step` runs several times (it must be pure) and must handle no messages. A `LookupFailed` is no message's
    fault: its original exception is raised.
    """
    try:
        try:
            return step(messages), []
        except LookupFailed:
            raise
        except Exception:
            pass
        failed = {i: exc for i, m in enumerate(messages) if (exc := _raised(step, [m])) is not None}
        while True:
            kept = [i for i in range(len(messages)) if i not in failed]
            rest = [messages[i] for i in kept]
            try:
                result = step(rest)
            except LookupFailed:
                raise
            except Exception as exc:
                error = exc
            else:
                return result, [DeadLetter(messages[i].offset, messages[i].value, reason, describe(exc),
                                           partition=messages[i].partition) for i, exc in sorted(failed.items())]
            low, high = 1, len(rest)  # step(rest[:low]) passes (each message alone does), step(rest[:high]) raises
            while high - low > 1:
                middle = (low + high) // 2
                raised = _raised(step, rest[:middle])
                if raised is None:
                    low = middle
                else:
                    high, error = middle, raised
            failed[kept[high - 1]] = error
    except LookupFailed as exc:
        raise exc.original from exc.original.__cause__


def _raised(step: Callable[[Sequence[Message]], object], messages: Sequence[Message]) -> Exception | None:
    """The exception `step(messages)` raises, or None (a `LookupFailed` goes through)."""
    try:
        step(messages)
    except LookupFailed:
        raise
    except Exception as exc:
        return exc
    return None
