"""A worker's periodic look for newly published collections (`ldpstream.aggregator.worker.PublishedTopics`) reads the
specs
topic and lists the cluster's topics only when the specs topic has grown or a published topic was still missing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from ldpstream.aggregator.worker import PublishedTopics, wait_for_report_topics
from ldpstream.runtime.kafka import ReportProducer, ensure_topic
from ldpstream.runtime.settings import Settings


@dataclass
class CountingPlans:
    """A plan registry stand-in: the topics of its "published" collections, and how often it was read."""

    topics: list[str]
    reads: int = 0

    def plans(self) -> list[SimpleNamespace]:
        self.reads += 1
        return [SimpleNamespace(spec=SimpleNamespace(topic=t)) for t in self.topics]


@pytest.mark.integration
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
    assert wait_for_report_topics(watch) == [first] and plans.reads == 1  # the worker's start, not its first tick
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


@dataclass
class Unanswered:
    """PublishedTopics while Kafka is down for the first `down` calls, then with `topics` published."""

    down: int
    topics: list[str]
    bootstrap: str = "127.0.0.1:1"
    calls: int = 0

    def __call__(self) -> list[str]:
        self.calls += 1
        if self.calls <= self.down:
            raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "All broker connections are down"))
        return self.topics


def test_a_worker_started_before_kafka_waits_for_it_saying_so(caplog: pytest.LogCaptureFixture) -> None:
    published = Unanswered(down=3, topics=["ldp.reports.a"])
    with caplog.at_level("WARNING"):
        assert wait_for_report_topics(published, poll_s=0.0) == ["ldp.reports.a"]  # type: ignore[arg-type]
    assert published.calls == 4
    assert caplog.text.count("Kafka at 127.0.0.1:1 is not answering (All broker connections are down); waiting") == 3
