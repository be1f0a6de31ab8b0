"""Publishing specs to the compacted topic against the real Kafka: published versions are immutable."""

from __future__ import annotations

import uuid

import pytest

from ldpstream.contract.spec import SpecError, parse_spec
from ldpstream.contract.topics import DLQ_TOPIC, SPECS_TOPIC
from ldpstream.runtime.kafka import ReportProducer, ensure_topic, topic_partitions
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import SIGNATURE_HEADER, load_signing_key, sign
from ldpstream.runtime.specs import publish_spec, read_specs, specs_topic

pytestmark = pytest.mark.integration


def fresh_spec(epsilon: float = 1.0, partitions: int = 2) -> str:
    return f"""
name: test-publish-{uuid.uuid4().hex[:10]}
version: 1
epsilon: {epsilon}
partitions: {partitions}
attributes: [{{name: level, type: numeric, range: [0, 10]}}, {{name: mode, type: categorical, values: [a, b]}}]
"""


def test_publish_once_then_same_content_is_a_no_op_and_different_content_is_refused(
        live_services: Settings) -> None:
    text = fresh_spec()
    spec = parse_spec(text)  # its topic stays: a published spec's topic is where readers of the specs look
    first = publish_spec(spec, live_services.bootstrap)
    assert first.created and first.key == spec.key and first.topic == spec.topic
    assert topic_partitions(live_services.bootstrap, spec.topic) == 2
    assert topic_partitions(live_services.bootstrap, DLQ_TOPIC) >= 1
    again = publish_spec(parse_spec(text.replace("level, type", "level,  type")), live_services.bootstrap)
    assert not again.created
    changed = parse_spec(text.replace("epsilon: 1.0", "epsilon: 2.0"))
    with pytest.raises(SpecError, match=f"{spec.key} is already published with different content"):
        publish_spec(changed, live_services.bootstrap)
    published = read_specs(live_services.bootstrap)
    assert published[spec.key] == spec
    assert published[spec.key].epsilon == 1.0
    newer = changed.replace(version=2)
    assert publish_spec(newer, live_services.bootstrap).created
    again = read_specs(live_services.bootstrap, known=published)  # known keys are not parsed again
    assert again[spec.key] is published[spec.key] and again[newer.key].epsilon == 2.0


def test_ensure_topic_is_idempotent_and_checks_partitions(live_services: Settings, topics: list[str]) -> None:
    name = f"ldp.test.topic-{uuid.uuid4().hex[:10]}"
    topics.append(name)
    assert ensure_topic(live_services.bootstrap, name, 2)
    assert not ensure_topic(live_services.bootstrap, name, 2)
    with pytest.raises(Exception, match="exists with 2 partitions, not 3"):
        ensure_topic(live_services.bootstrap, name, 3)
    assert not ensure_topic(live_services.bootstrap, SPECS_TOPIC, 1, compacted=True)


def test_invalid_messages_in_the_specs_topic_are_skipped_with_a_reason(live_services: Settings) -> None:
    good = parse_spec(fresh_spec())
    admin = load_signing_key(live_services.spec_signing_key)  # signed, so that the content is what is refused
    topic = specs_topic()  # the module's own (tests/conftest.py)
    ensure_topic(live_services.bootstrap, topic, 1, compacted=True)
    producer = ReportProducer(live_services.bootstrap, linger_ms=0)
    for key, value in ((f"{good.name}-bad@1".encode(), b"{not: [a spec"),
                       (f"{good.name}@7".encode(), good.canonical_json().encode())):  # wrong key
        producer.produce(topic, value, key, headers=((SIGNATURE_HEADER, sign(admin, key, value)),))
    producer.flush()
    publish_spec(good, live_services.bootstrap)
    invalid: list[str] = []
    specs = read_specs(live_services.bootstrap, invalid)
    assert specs[good.key] == good
    assert f"{good.name}-bad@1" not in specs and f"{good.name}@7" not in specs
    assert any(f"{good.name}-bad@1" in reason for reason in invalid)
    assert any(f"holds the spec {good.key!r}" in reason for reason in invalid)


def test_the_specs_topic_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from ldpstream.contract.topics import SPECS_TOPIC
    from ldpstream.runtime.specs import specs_topic

    monkeypatch.delenv("LDP_SPECS_TOPIC", raising=False)
    assert specs_topic() == SPECS_TOPIC == "ldp.collections"
    monkeypatch.setenv("LDP_SPECS_TOPIC", "ldp.test.registry")
    assert specs_topic() == "ldp.test.registry"
