"""Fake devices over the real pipeline: honest windows and one with 5% maximal-gain fakes go through Kafka and a
worker into Redis; the live estimate flags the attacked window, its audit reads the window back from Kafka, keeps
the fakes' reports in ldp.setaside and its record beside the statistics, which stay exactly as the worker counted.
The enrolment side: a revoked token enrols nothing more, an address over its daily cap is refused, and the record of
what each token enrolled counts devices, never names them."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from edge_support import running_edge
from pipeline_support import Collection
from test_device_join import enrol, token_for

from ldpstream.aggregator.audit import audit_window
from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processes import stop_worker
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_partitions
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.topics import SETASIDE_TOPIC
from ldpstream.contract.wire import AttributeColumns, encode_envelope, envelope_of
from ldpstream.edge.join import revoke_token, token_usage
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.runtime.kafka import consumer_client, delete_topic, message_headers, producer_client
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.simulator.poisoning import fake_frequency_reports
from ldpstream.simulator.population import zipf_probabilities

pytestmark = pytest.mark.integration
D, N, M = 32, 20_000, 1_000
MINUTE = 60_000
TARGETS = np.array([19, 23, 26, 29, 31])


@pytest.fixture
def poisoned(live_services: Settings) -> Iterator[Collection]:
    """A one-attribute OUE collection with one-minute windows, published under a unique name."""
    spec = parse_spec(json.dumps({
        "name": f"it-poison-{uuid.uuid4().hex[:8]}", "version": 1, "epsilon": 2.0, "sampling": 1, "partitions": 2,
        "windows": ["1m"], "attributes": [{"name": "item", "type": "categorical",
                                           "values": [f"v{i}" for i in range(D)], "mechanism": "oue"}]}))
    publish_spec(spec, live_services.bootstrap)
    c = Collection(live_services, spec, RedisStore(live_services.redis), f"ldp-aggregator-it-{spec.name}")
    try:
        yield c
    finally:
        c.store.delete_collection(spec.name)
        delete_topic(live_services.bootstrap, spec.topic)


def produce(c: Collection, reports: dict[str, np.ndarray], devices: np.ndarray, time_ms: int) -> None:
    """The reports as the edge writes them: per partition, envelopes of 500 reports of the devices it holds."""
    producer = producer_client(c.cfg.bootstrap)
    parts = device_partitions(devices, c.spec.partitions)
    for p in range(c.spec.partitions):
        rows = np.flatnonzero(parts == p)
        for lo in range(0, len(rows), 500):
            take = rows[lo:lo + 500]
            env = envelope_of(c.spec.name, 1, devices[take], np.full(len(take), time_ms),
                              {0: AttributeColumns(np.arange(len(take), dtype=np.uint32),
                                                   {k: v[take] for k, v in reports.items()})})
            producer.produce(c.spec.topic, encode_envelope(env), partition=p)
    assert producer.flush(30) == 0


def set_aside_rows(cfg: Settings, topic: str) -> int:
    """Rows of the test's topic that ldp.setaside holds."""
    consumer = consumer_client(cfg.bootstrap, f"it-{uuid.uuid4().hex}", **{"enable.partition.eof": True})
    consumer.assign([TopicPartition(SETASIDE_TOPIC, 0, OFFSET_BEGINNING)])
    rows = 0
    try:
        while (msg := consumer.poll(5.0)) is not None:
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF
                break
            headers = dict(message_headers(msg) or ())
            if headers.get("source_topic") == topic.encode():
                rows += len(json.loads(headers["rows"]))
    finally:
        consumer.close()
    return rows


def test_an_attacked_window_is_flagged_live_then_audited_from_kafka(poisoned: Collection, tmp_path: Path) -> None:
    c = poisoned
    plan = Plan.load(c.spec, c.cfg.bootstrap)
    oracle = plan.mechanisms[0]
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(3)
    first = (now_ms() // MINUTE + 1) * MINUTE  # three windows ahead, within the worker's allowed clock skew (5 min)
    for w in range(3):
        values = rng.choice(D, size=N - (M if w == 2 else 0), p=zipf_probabilities(D, 1.0))
        reports = oracle.perturb(values, rng)
        if w == 2:
            fakes = fake_frequency_reports(oracle, "maximal_gain", TARGETS, M, rng)
            reports = {k: np.concatenate([reports[k], fakes[k].astype(reports[k].dtype)]) for k in reports}
        produce(c, reports, np.arange(1, N + 1, dtype=np.uint64) + w * 10 * N, first + w * MINUTE + 500)
    worker = c.start_worker(tmp_path / "worker.log")
    try:
        assert c.wait_accepted(3 * N, timeout_s=120) == 3 * N
    finally:
        stop_worker(worker)
    attacked = first + 2 * MINUTE
    live = collection_estimates(c.store, plan, f"1m:{attacked}")["poisoning"]
    assert live["source"] == "live" and live["alert"] and live["reference"]["windows"] == 2
    assert {f"v{t}" for t in TARGETS} <= set(live["attributes"]["item"]["suspects"])
    before = c.store.read_window(c.spec.name, 1, "1m", attacked, plan.sizes)
    outcomes = c.store.outcomes(c.spec.name)
    audit = audit_window(c.cfg.bootstrap, c.store, plan, "1m", attacked, force=True)  # not closed yet: forced
    assert audit.reports == N
    assert set_aside_rows(c.cfg, c.spec.topic) >= M  # every fake supports all 5 targets: each one set aside, kept
    audited = collection_estimates(c.store, plan, f"1m:{attacked}")["poisoning"]
    assert audited["source"] == "audit" and audited["alert"]
    assert M <= audited["set_aside"] <= M + N * 1e-3 + 4 * (N * 1e-3) ** 0.5
    after = c.store.read_window(c.spec.name, 1, "1m", attacked, plan.sizes)
    assert all(np.array_equal(before.stats[j], after.stats[j]) for j in before.stats)  # counted once, untouched
    assert c.store.outcomes(c.spec.name) == outcomes
    honest = collection_estimates(c.store, plan, f"1m:{first + MINUTE}")["poisoning"]
    assert not honest["alert"] and honest["set_aside"] == 0


def test_a_revoked_token_enrols_nothing_more_and_the_record_counts_devices(
        live_services: Settings, tmp_path: Path) -> None:
    name = f"it-tokens-{uuid.uuid4().hex[:8]}"
    token = token_for(live_services, name, uses=10)
    token_id = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["id"]
    client = redis_client(live_services.redis)
    if (left := 86_400_000 - now_ms() % 86_400_000) < 60_000:  # the daily cap counts per UTC day
        time.sleep(left / 1000)
    client.delete(*client.keys("ldp:edge:enrol:addr:*") or ["none"])  # other tests enrolled from here today
    spec = parse_spec(json.dumps({"name": name, "version": 1, "epsilon": 1.0, "attributes": [
        {"name": "x", "type": "numeric", "range": [0, 1]}]}))
    publish_spec(spec, live_services.bootstrap)
    try:
        for edge in running_edge(tmp_path, "--enrol-per-address", "1000", "--enrol-per-address-day", "4"):
            assert [enrol(edge.url, token, name)[0] for _ in range(2)] == [201, 201]
            usage = {u.token: u for u in token_usage(client)}
            assert usage[token_id].enrolled == 2 and not usage[token_id].revoked  # how many, never which
            assert revoke_token(client, token_id) and not revoke_token(client, token_id)
            status, answer = enrol(edge.url, token, name)
            assert (status, answer["reason"]) == (403, "token_revoked")
            other = token_for(live_services, name, uses=10)
            statuses = [enrol(edge.url, other, name)[0] for _ in range(2)]
            assert statuses == [201, 429]  # the address's fifth enrolment attempt today (the revoked one counted)
            assert {u.token: u for u in token_usage(client)}[token_id].revoked
    finally:
        delete_topic(live_services.bootstrap, spec.topic)
        client.delete(*client.keys(f"ldp:edge:enrol:{{tok:{token_id}}}:*") or ["none"])
