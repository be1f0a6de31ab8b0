"""The worker's reaction to a store that went back in time: the partition is read again, the rest goes on."""

from __future__ import annotations

import time
from typing import Any, cast

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

    def get(self, name: str, version: int) -> Plan | None:
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
