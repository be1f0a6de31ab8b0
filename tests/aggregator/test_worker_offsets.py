"""The worker's reaction to a store that went back in time: the partition is read again, the rest goes on."""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
import pytest
from test_processing import PLAN, TOPIC, Plan, message

from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.processing import Message
from ldpstream.aggregator.store import NOT_APPLIED, MemoryStore
from ldpstream.aggregator.worker import BatchHandler
from ldpstream.contract.spec import parse_spec
from ldpstream.runtime.dlq import DeadLetter, DeadLetterProducer

PLAN2 = Plan(parse_spec(PLAN.spec.canonical_json().replace('"partitions":1', '"partitions":2')), PLAN.mechanisms)


class Plans:
    """The one published plan (what `PlanRegistry.get` answers)."""

    def get(self, name: str, version: int, produced_ms: int | None = None) -> Plan | None:
        return PLAN2 if (name, version) == ("unit", 1) else None


class Letters:
    """A dead-letter producer that keeps what it is given."""

    def __init__(self) -> None:
        self.sent: list[DeadLetter] = []

    def send(self, topic: str, letters: list[DeadLetter]) -> None:
        self.sent += letters


def reports(partition: int, offset: int, first_device: int) -> Message:
    """Two fresh devices of the partition (pseudonym mod 2) reporting now."""
    devices = [first_device * 2 + partition, first_device * 2 + 2 + partition]
    return message(devices, offset, ts=int(time.time() * 1000), partition=partition)


@pytest.fixture
def handler() -> tuple[BatchHandler, MemoryStore, list[str]]:
    store, reasons = MemoryStore(), []
    plans = cast(PlanRegistry, Plans())
    return BatchHandler(store, plans, cast(DeadLetterProducer, Letters()), reread=reasons.append), store, reasons


def test_a_gap_has_its_partition_read_again_and_the_others_applied(
        handler: tuple[BatchHandler, MemoryStore, list[str]], caplog: Any) -> None:
    h, store, reasons = handler
    h.handle_topic(TOPIC, [reports(0, 0, 0), reports(1, 0, 0)])
    assert store.offsets("unit") == {f"{TOPIC}:0": 0, f"{TOPIC}:1": 0}
    assert h.seen.synced(TOPIC, 1) == 0
    # this worker read partition 1 up to offset 4, whose batches the store has lost: it continues from 5
    h.continues[(TOPIC, 1)] = 5
    h.handle_topic(TOPIC, [reports(0, 1, 10), reports(1, 5, 10)])
    assert store.offsets("unit") == {f"{TOPIC}:0": 1, f"{TOPIC}:1": 0}
    assert store.outcomes("unit") == {"accepted": 6}
    assert len(reasons) == 1 and f"{TOPIC}:1" in reasons[0] and h.rereading == {(TOPIC, 1)}
    assert f"{TOPIC}:1 applied 0, batch from 5" in caplog.text
    assert (TOPIC, 1) not in h.seen._partitions  # its dedupe lists are reloaded with the re-read
    h.handle_topic(TOPIC, [reports(0, 2, 20), reports(1, 6, 20)])  # until the re-read, its messages are dropped
    assert store.offsets("unit") == {f"{TOPIC}:0": 2, f"{TOPIC}:1": 0} and len(reasons) == 1
    assert store.outcomes("unit") == {"accepted": 8}


def test_a_store_gone_back_is_noticed_without_a_batch_to_find_it(
        handler: tuple[BatchHandler, MemoryStore, list[str]], caplog: Any) -> None:
    h, store, reasons = handler
    h.handle_topic(TOPIC, [reports(0, 0, 0), reports(0, 1, 10), reports(1, 0, 0)])
    h.check_store()
    assert reasons == []  # the store has what this worker applied
    h.store = gone_back = MemoryStore()  # it lost everything, and no more messages come
    gone_back.skip_lost("unit", f"{TOPIC}:1", NOT_APPLIED, 1)  # only partition 0's offset went back
    h.check_store()
    assert len(reasons) == 1 and h.rereading == {(TOPIC, 0)}
    assert f"{TOPIC}:0 applied -1, this worker applied up to 1" in caplog.text
    h.check_store()
    assert len(reasons) == 1  # asked once


def test_two_workers_reading_the_same_partitions_apply_each_message_once() -> None:
    """Two workers that both read every partition (two consumer groups on one collection; or, for a while, the old
    and the new owner of a partition after a rebalance), their store writes interleaved: every report is counted
    once, and neither gives up, restarts or dead-letters anything. Before, a worker whose range overlapped the
    other's writes started its next range from where it last read, overlapped again, and gave up after 8 rounds
    (its messages then marked as in hand at a crash, and set aside as poison at the second)."""
    rng = np.random.default_rng(5)
    store = MemoryStore()
    workers = [BatchHandler(store, cast(PlanRegistry, Plans()), cast(DeadLetterProducer, Letters()),
                            reread=lambda reason: pytest.fail(reason), exit=lambda code: pytest.fail(str(code)))
               for _ in range(2)]
    stream = [reports(p, o, 2 * (1000 * p + o)) for o in range(80) for p in (0, 1)]
    queues = []
    for _ in workers:  # each worker's own micro-batches of the same stream
        cuts = np.sort(rng.choice(np.arange(1, len(stream)), 25, replace=False))
        queues.append([list(chunk) for chunk in np.split(np.array(stream, dtype=object), cuts)])
    while any(queues):
        i = int(rng.integers(2)) if all(queues) else int(bool(queues[1]))
        workers[i].handle_topic(TOPIC, queues[i].pop(0))
    assert store.offsets("unit") == {f"{TOPIC}:0": 79, f"{TOPIC}:1": 79}
    assert store.outcomes("unit") == {"accepted": 2 * len(stream)}
    assert all(not w.rereading for w in workers)
    assert [d.reason for w in workers for d in cast(Letters, w.dlq).sent] == []
