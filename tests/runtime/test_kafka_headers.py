"""`read_to_end` hands over every message's headers, and survives headers confluent-kafka cannot decode (a header
name that is not UTF-8, which clients other than ours can send), however many times it meets them."""

from __future__ import annotations

import uuid

import pytest

from ldpstream.runtime.kafka import ReportProducer, client_config, ensure_topic, read_to_end
from ldpstream.runtime.settings import Settings
from tests.kafka_raw import librdkafka, produce_raw

pytestmark = pytest.mark.integration


def test_undecodable_headers_read_as_none_every_time(live_services: Settings, topics: list[str]) -> None:
    topic = f"ldp.test.headers-{uuid.uuid4().hex[:10]}"
    topics.append(topic)
    ensure_topic(live_services.bootstrap, topic, 1)
    lib = librdkafka()
    assert lib is not None, "no librdkafka found to produce a header name that is not UTF-8 with"
    producer = ReportProducer(live_services.bootstrap, linger_ms=0)
    for i in range(20):  # more than the calls after which CPython specialises a call site
        produce_raw(lib, client_config(live_services.bootstrap), topic, b"bad", str(i).encode(), b"\xff\xfe", b"x")
        producer.produce(topic, str(i).encode(), b"good", headers=(("ok", str(i).encode()), ("none", None)))
        producer.flush()
    for _ in range(2):
        records = list(read_to_end(live_services.bootstrap, topic))
        assert [r.headers for r in records if r.key == b"bad"] == [None] * 20
        assert [r.headers for r in records if r.key == b"good"] == [(("ok", str(i).encode()), ("none", None))
                                                                    for i in range(20)]
        assert repr(records)  # nothing in them is broken
