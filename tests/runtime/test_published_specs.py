"""`PublishedSpecs.read_since`: a spec published before a miss arrived is found by it, and misses share reads."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import ldpstream.runtime.specs as specs_module
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.runtime.specs import PRODUCER_SKEW_MS, PublishedSpecs

EXAMPLE = load_spec(Path(__file__).resolve().parents[2] / "examples" / "diagnostics.yaml")


class Topic:
    """The specs topic as `read_specs` sees it: what was published, and how often it was read."""

    def __init__(self) -> None:
        self.published: dict[str, CollectionSpec] = {}
        self.reads = 0
        self.reading = threading.Event()  # set when a read has begun
        self.gate = threading.Event()  # a read returns once it is set
        self.gate.set()

    def read(self, bootstrap: str, invalid: list[str] | None = None, **_: Any) -> dict[str, CollectionSpec]:
        self.reads += 1
        seen = dict(self.published)  # what the topic held when the read began
        self.reading.set()
        self.gate.wait(5)
        return seen

    def publish(self, name: str) -> None:
        spec = EXAMPLE.replace(name=name)
        self.published[spec.key] = spec


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> Topic:
    fake = Topic()
    monkeypatch.setattr(specs_module, "read_specs", fake.read)
    return fake


def test_a_spec_published_just_after_a_read_is_found_by_the_next_miss(topic: Topic) -> None:
    plans = PublishedSpecs("unused:9092", lambda spec, _: spec.name, refresh_s=0.3)
    plans.read_since(time.monotonic())
    topic.publish("fresh")  # within refresh_s of the last read: the miss waits for the next one, not None at once
    plans.read_since(time.monotonic())
    assert plans.newest("fresh") == "fresh" and topic.reads == 2


def test_misses_arriving_together_share_one_read(topic: Topic) -> None:
    plans = PublishedSpecs("unused:9092", lambda spec, _: spec.name, refresh_s=0.2)
    plans.read_since(time.monotonic())
    arrived = time.monotonic()
    threads = [threading.Thread(target=plans.read_since, args=(arrived,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert topic.reads == 2  # the first read, then one for all eight misses


def test_a_miss_during_a_read_begun_before_it_waits_for_the_next(topic: Topic) -> None:
    plans = PublishedSpecs("unused:9092", lambda spec, _: spec.name, refresh_s=0.0)
    topic.gate.clear()
    first = threading.Thread(target=plans.read_since, args=(time.monotonic(),))
    first.start()
    assert topic.reading.wait(5)
    topic.publish("late")  # after the read in progress began: that read does not hold it
    second = threading.Thread(target=plans.read_since, args=(time.monotonic(),))
    second.start()
    topic.gate.set()
    first.join(5)
    second.join(5)
    assert plans.newest("late") == "late" and topic.reads == 2


def test_a_report_of_a_version_published_after_the_last_read_is_not_taken_for_an_unknown_one(topic: Topic) -> None:
    plans = PublishedSpecs("unused:9092", lambda spec, _: spec.name, refresh_s=0.3)
    plans.read_since(time.monotonic())
    topic.publish("fresh")  # then an edge admits a report of it: produced after the last read
    produced_ms = int(time.time() * 1000)
    assert plans.get("fresh", EXAMPLE.version, produced_ms) == "fresh" and topic.reads == 2


def test_a_miss_for_a_message_produced_well_before_the_last_read_reads_nothing_within_refresh_s(topic: Topic) -> None:
    plans = PublishedSpecs("unused:9092", lambda spec, _: spec.name, refresh_s=60.0)
    plans.read_since(time.monotonic())
    produced_ms = int(time.time() * 1000) - PRODUCER_SKEW_MS - 1_000  # the last read began after it was produced
    started = time.monotonic()
    assert plans.get("bogus", 1, produced_ms) is None and plans.get("bogus", 1) is None
    assert topic.reads == 1 and time.monotonic() - started < 30.0  # no read, and no wait for one (60 s)
