"""500k devices through the 3-node Kafka cluster to 3 workers while one broker is SIGKILLed mid-stream (no
controlled shutdown: its partitions' leadership moves once the controllers fence it) and started again: the count
is exact and every estimate is within 4 standard errors. Producers are idempotent with acks=all and topics have 3
replicas with min.insync.replicas 2, so nothing acknowledged is lost with one broker down."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_support import Workers, kafka_node, kill, stream_through
from pipeline_support import assert_within_stderr, published_collection, send_in_background

from ldpstream.runtime.kafka import admin_client
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.cluster

DEVICES = 500_000


def test_500k_devices_three_workers_a_broker_killed_mid_stream(cluster: Settings, tmp_path: Path) -> None:
    with published_collection(cluster) as c:
        topic = admin_client(cluster.bootstrap).list_topics(c.spec.topic, timeout=30).topics[c.spec.topic]
        assert {len(p.replicas) for p in topic.partitions.values()} == {3}
        workers = Workers(c, 3, tmp_path)
        # the producer retries through the leader elections (idempotent: its retries add no duplicates)
        fleet = send_in_background(c, DEVICES, rate=25_000, seed=51,
                                   producer_config={"extra": {"message.timeout.ms": 180_000}})

        def kill_a_broker() -> None:
            node = kafka_node(cluster, 1)
            kill(node.pidfile)
            time.sleep(3)
            node.start()

        result = stream_through(c, workers, fleet, DEVICES, kill_a_broker, started=60_000)
        assert_within_stderr(c.estimates(), result.truth)
