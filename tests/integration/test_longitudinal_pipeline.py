"""Privacy over time, end to end over Kafka: 100,000 devices with a memoized mechanism report every hour for 24 hours.

The fleet (`producer.simulator`, the same devices, records and secrets every round) sends each hour's reports to
Kafka; the worker's processing (`aggregator.processing.PartitionProcessor`, the dedupe lists and the Redis store)
consumes them hour by hour. It runs in this process on the simulated clock: the worker process judges report times
by the wall clock, which would call 23 of the 24 simulated hours stale. Each device keeps its ledger
(`producer.ledger`), charged with the memos its reports read (`producer.perturb.report_memos`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from pipeline_support import Collection, published_collection

from aggregator.dedupe import SeenDevices
from aggregator.estimates import collection_estimates
from aggregator.processing import Message, PartitionProcessor
from producer.ledger import PrivacyLedger
from producer.perturb import report_memos
from producer.population import PopulationTruth
from producer.simulator import chunk_messages, fleet, simulated_secrets
from runtime.clock import now_ms
from runtime.kafka import ReportProducer, consumer_client
from runtime.settings import Settings

pytestmark = pytest.mark.integration
DEVICES, HOURS, SEED, CHUNK = 100_000, 24, 11, 8_000
HOUR_MS = 3_600_000


@pytest.fixture
def memoized(live_services: Settings) -> Iterator[Collection]:
    """examples/app_lifetime.yaml (privacy: per_report 1, lifetime 4, values 2) published under a unique name."""
    with published_collection(live_services, "app_lifetime.yaml") as c:
        yield c


def consume(consumer: Consumer, count: int, timeout_s: float = 60.0) -> dict[int, list[Message]]:
    """The next `count` messages the consumer reads, per partition in offset order."""
    out: dict[int, list[Message]] = {}
    deadline = time.monotonic() + timeout_s
    while count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        out.setdefault(msg.partition(), []).append(Message(msg.offset(), msg.value(), partition=msg.partition()))
        count -= 1
    assert count == 0, f"{count} messages not read in {timeout_s} s"
    return out


def test_24_hours_of_100k_memoized_devices(memoized: Collection) -> None:
    c, spec = memoized, memoized.spec
    privacy = spec.privacy
    assert privacy is not None
    first_hour = now_ms() // HOUR_MS * HOUR_MS - HOURS * HOUR_MS
    producer = ReportProducer(c.cfg.bootstrap)
    consumer = consumer_client(c.cfg.bootstrap, f"it-memo-{uuid.uuid4().hex[:6]}")
    consumer.assign([TopicPartition(spec.topic, p, 0) for p in range(spec.partitions)])
    clock = [first_hour]
    processor = PartitionProcessor(lambda n, v: c.plan if (n, v) == (spec.name, spec.version) else None,
                                   lambda: clock[0])
    seen = SeenDevices(c.store)
    ledgers = [PrivacyLedger() for _ in range(DEVICES)]
    truths = []
    try:
        for hour in range(HOURS):
            sent = 0
            at = first_hour + hour * HOUR_MS + 1_800_000  # half past
            truth = PopulationTruth(spec)
            for index, (records, reports) in enumerate(fleet(spec, DEVICES, seed=SEED, chunk=CHUNK,
                                                             clock_ms=lambda at=at: at, report_round=hour)):
                truth.add(records)
                lo = index * CHUNK
                memos = report_memos(spec, records, simulated_secrets(SEED, lo, len(reports)))
                for ledger, device_memos in zip(ledgers[lo:lo + len(reports)], memos, strict=True):
                    ledger.charge(spec, at, memos=device_memos)
                for partition, key, message in chunk_messages(spec, reports, f"{spec.key}/{hour}/{index}"):
                    producer.produce(spec.topic, message, key, partition)
                    sent += 1
            producer.flush(timeout_s=60.0)
            truths.append(truth.to_dict())
            clock[0] = at + 60_000
            for batch in consume(consumer, sent).values():
                for i in range(0, len(batch), 40):
                    result = processor.process(spec.topic, batch[i:i + 40], seen)
                    assert result.update is not None and not result.dead_letters, result.dead_letters[:1]
                    assert c.store.apply(result.update).status == "applied"
                    seen.commit(spec.topic, result.update, clock[0])
    finally:
        consumer.close()
    assert c.accepted() == DEVICES * HOURS
    assert all(t == truths[0] for t in truths), "the same devices report the same values every hour"
    for hour in range(HOURS):
        estimates = collection_estimates(c.store, c.plan, f"1h:{first_hour + hour * HOUR_MS}")
        assert estimates["reports"] == DEVICES
        for name, entry in estimates["attributes"].items():
            true = truths[hour]["attributes"][name]
            if "mean" in entry:
                assert abs(entry["mean"] - true["mean"]) <= 4 * entry["stderr"], (hour, name, entry, true)
            else:
                for v, e in entry["frequencies"].items():
                    assert abs(e["estimate"] - true["frequencies"][v]) <= 4 * e["stderr"], (hour, name, v, e)
    # Every device reported 24 times one value of its one attribute: one memo, eps_inf = lifetime / values, paid once.
    per_value = privacy.lifetime / privacy.values
    spent = np.array([ledger.lifetime_spent(spec.name) for ledger in ledgers])
    assert np.allclose(spent, per_value, rtol=1e-12, atol=0.0) and spent.max() <= privacy.lifetime
    assert all(len(ledger.memos(spec.name)) == 1 for ledger in ledgers)
    last = first_hour + (HOURS - 1) * HOUR_MS
    assert all(ledger.spent(spec, last) == pytest.approx(spec.epsilon, rel=1e-12) for ledger in ledgers[:1000])
