"""A worker's periodic look for newly published collections (`ldpstream.aggregator.worker.PublishedTopics`) reads the
specs
topic and lists the cluster's topics only when the specs topic has grown or a published topic was still missing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ldpstream.aggregator.worker import PublishedTopics
from ldpstream.runtime.kafka import ReportProducer, ensure_topic
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration


@dataclass
class CountingPlans:
    """A plan registry stand-in: the topics of its "published" collections, and how often it was read."""

    topics: list[str]
    reads: int = 0

    def plans(self) -> list[SimpleNamespace]:
        self.reads += 1
        return [SimpleNamespace(spec=SimpleNamespace(topic=t)) for t in self.topics]


def test_the_specs_topic_is_read_again_only_when_it_grew_or_a_topic_was_missing(
        live_services: Settings, topics: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run = uuid.uuid4().hex[:8]
    specs, first, second = f"ldp.collections.test-{run}", f"ldp.reports.test-a-{run}", f"ldp.reports.test-b-{run}"
    topics.extend([specs, first, second])
    monkeypatch.setenv("LDP_SPECS_TOPIC", specs)
    ensure_topic(live_services.bootstrap, specs, 1, compacted=True)
    ensure_topic(live_services.bootstrap, first, 1)
    plans = CountingPlans([first])
    watch = PublishedTopics(plans, live_services.bootstrap)  # type: ignore[arg-type]
    assert plans.reads == 1  # read when made: the worker's start, not its first tick under load
    assert watch() == [first] and plans.reads == 1
    assert watch() == [first] and watch() == [first] and plans.reads == 1  # nothing new: no read
    plans.topics.append(second)  # published, its topic not created yet
    producer = ReportProducer(live_services.bootstrap, linger_ms=0)
    producer.produce(specs, b"{}", b"b@1")
    producer.flush()
    assert watch() == [first] and plans.reads == 2
    assert watch() == [first] and plans.reads == 3  # a published topic is missing: look again every time
    ensure_topic(live_services.bootstrap, second, 1)
    assert watch() == [first, second] and plans.reads == 4
    assert watch() == [first, second] and plans.reads == 4
