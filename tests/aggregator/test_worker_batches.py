"""The worker's batch handler without Kafka: bounded store writes, and poison-pill quarantine across crashes."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from ldpstream.aggregator.processing import POISON, PartitionProcessor
from ldpstream.aggregator.quarantine import MemoryCrashMarks
from ldpstream.aggregator.store import MemoryStore
from ldpstream.aggregator.worker import EXIT_CRASHED, MIN_BATCH_BYTES, BatchHandler, write_units
from ldpstream.runtime.dlq import DeadLetter, Message
from tests.aggregator.test_processing import NOW, PLAN, TOPIC, message


class Exited(Exception):
    """What the handler's exit(status) raises here instead of ending the test process."""


@dataclass
class Letters:
    """A dead-letter producer that keeps what it is given."""

    sent: list[DeadLetter]

    def send(self, topic: str, letters: list[DeadLetter]) -> None:
        self.sent += letters


def events(messages: Sequence[Message]) -> list[Any]:
    return [SimpleNamespace(message=SimpleNamespace(topic=TOPIC, partition=m.partition, offset=m.offset,
                                                    value=m.value, timestamp=m.timestamp_ms)) for m in messages]


def exit_raising(status: int) -> None:
    raise Exited(status)


def handler(store: MemoryStore, marks: MemoryCrashMarks, letters: Letters, poison: int | None = None,
            max_batch_bytes: int = 10**9) -> BatchHandler:
    """A fresh worker's handler ("restarted": it shares the store and the crash marks); processing raises for the
    message at offset `poison`, as a bug would."""
    h = BatchHandler(store, SimpleNamespace(get=lambda name, version: PLAN), letters,  # type: ignore[arg-type]
                     marks=marks, max_batch_bytes=max_batch_bytes, exit=exit_raising)
    h.processor = PartitionProcessor(lambda name, version, _: PLAN, lambda: NOW)
    if poison is not None:
        process = h.processor.process

        def failing(topic: str, messages: Sequence[Message], seen: Any = None, quarantined: Any = (),
                    continues: Any = None) -> Any:
            if any(m.offset == poison and (m.partition, m.offset) not in quarantined for m in messages):
                raise ZeroDivisionError("a bug met by one message")  # when it is decoded
            return process(topic, messages, seen, quarantined, continues)

        h.processor.process = failing  # type: ignore[method-assign]
    applied = store.offsets("unit").get(f"{TOPIC}:0")
    h.on_assigned(TOPIC, {} if applied is None else {0: applied}, {0: 0 if applied is None else applied + 1})
    return h


def test_a_message_that_crashes_a_worker_twice_is_quarantined_and_the_rest_counted() -> None:
    store, marks, letters = MemoryStore(), MemoryCrashMarks(), Letters([])
    batch = [message([10 * i + j for j in range(4)], offset=i, seed=i) for i in range(6)]
    runs = []
    for _ in range(4):  # each run: a restarted worker reads the partition again from the applied offset + 1
        applied = store.offsets("unit").get(f"{TOPIC}:0", -1)
        try:
            asyncio.run(handler(store, marks, letters, poison=3).handle(events([m for m in batch
                                                                               if m.offset > applied])))
            runs.append("done")
            break
        except Exited as exc:
            assert exc.args == (EXIT_CRASHED,)
            runs.append("crashed")
    assert runs == ["crashed", "crashed", "done"]  # all six in hand, then offset 3 alone, then quarantined
    assert store.offsets("unit") == {f"{TOPIC}:0": 5}
    assert store.outcomes("unit") == {"accepted": 20, f"rejected:{POISON}": 1}
    assert [(d.offset, d.reason, d.value) for d in letters.sent] == [(3, POISON, batch[3].value)]
    assert marks.load("unit", {0: 5}) == {}  # counts below the applied offset are dropped


def test_a_crash_in_hand_of_innocent_messages_costs_them_nothing() -> None:
    store, marks, letters = MemoryStore(), MemoryCrashMarks(), Letters([])
    batch = [message([10 * i + j for j in range(4)], offset=i, seed=i) for i in range(3)]
    marks.record("unit", [(0, 0), (0, 1), (0, 2)])  # a crash with these in hand, for a reason they did not cause
    asyncio.run(handler(store, marks, letters).handle(events(batch)))
    assert store.outcomes("unit") == {"accepted": 12} and not letters.sent
    assert store.offsets("unit") == {f"{TOPIC}:0": 2}


def test_store_writes_are_bounded_by_message_bytes() -> None:
    store, letters = MemoryStore(), Letters([])
    batch = [message([1000 * i + j for j in range(800)], offset=i, seed=i) for i in range(12)]
    h = handler(store, MemoryCrashMarks(), letters, max_batch_bytes=MIN_BATCH_BYTES)
    h.rate.bytes_per_s = 1.0  # as slow as can be: the floor decides
    writes = []
    apply = store.apply
    store.apply = lambda update: writes.append(update.ranges) or apply(update)  # type: ignore[method-assign]
    asyncio.run(h.handle(events(batch)))
    size = len(batch[0].value)
    assert len(writes) == -(-12 // (MIN_BATCH_BYTES // size)) > 1
    assert store.offsets("unit") == {f"{TOPIC}:0": 11} and store.outcomes("unit") == {"accepted": 12 * 800}


@pytest.mark.parametrize("sizes, limit, expected", [([], 5, []), ([9], 5, [[0]]), ([2, 2, 2], 4, [[0, 1], [2]]),
                                                    ([1, 9, 1], 4, [[0], [1], [2]])])
def test_write_units_keep_order_and_the_limit(sizes: list[int], limit: int, expected: list[list[int]]) -> None:
    units = list(write_units([Message(o, b"x" * n) for o, n in enumerate(sizes)], limit))
    assert [[m.offset for m in u] for u in units] == expected
