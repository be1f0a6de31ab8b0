"""The device SDK and the fleet simulator against the real Kafka: what arrives is what was sent, and only that."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from ldpstream.contract.pseudonym import device_pseudonym, pseudonym_key
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import decode
from ldpstream.device.ledger import BudgetExceeded, PrivacyLedger
from ldpstream.device.perturb import RecordError
from ldpstream.device.sdk import Device
from ldpstream.runtime.kafka import DeliveryError, ReportProducer, ensure_topic, read_to_end
from ldpstream.runtime.settings import Settings
from ldpstream.simulator.simulator import simulate
from tests.specs import mixed_spec

pytestmark = pytest.mark.integration
HOUR_MS = 3_600_000
T0 = 1_700_000_000_000 // HOUR_MS * HOUR_MS
RECORD = {"battery_level": 57.5, "memory_used": 2048, "screen_minutes": 300.0, "display_mode": "dark",
          "network": "5g"}


def fresh_spec(bootstrap: str, kind: str, topics: list[str]) -> CollectionSpec:
    spec = mixed_spec(name=f"test-{kind}-{uuid.uuid4().hex[:10]}")
    ensure_topic(bootstrap, spec.topic, spec.partitions)
    topics.append(spec.topic)
    return spec


def test_device_reports_round_trip_and_the_ledger_refuses_a_second_one(live_services: Settings,
                                                                        tmp_path: Path, topics: list[str]) -> None:
    spec = fresh_spec(live_services.bootstrap, "sdk", topics)
    producer = ReportProducer(live_services.bootstrap)
    ledger_file = tmp_path / "ledger.json"
    device = Device(spec, "phone-17", producer, PrivacyLedger.open(ledger_file), np.random.default_rng(1))
    sent = [device.report(RECORD, T0 + 1000)]
    with pytest.raises(BudgetExceeded):
        device.report(RECORD, T0 + 2000)
    with pytest.raises(RecordError, match="display_mode"):
        device.report({**RECORD, "display_mode": "sepia"}, T0 + HOUR_MS)
    restarted = Device(spec, "phone-17", producer, PrivacyLedger.open(ledger_file))  # the ledger survives
    with pytest.raises(BudgetExceeded):
        restarted.report(RECORD, T0 + 3000)
    next_hour = datetime.fromtimestamp((T0 + HOUR_MS) / 1000, tz=UTC)
    sent.append(restarted.report(RECORD, next_hour))  # the next window
    with pytest.raises(ValueError, match="time zone"):
        restarted.report(RECORD, datetime(2030, 1, 1))
    producer.flush(10)
    assert producer.delivered == 2 and producer.failed == 0
    received = list(read_to_end(live_services.bootstrap, spec.topic))
    assert sorted(value for _, value, _ in received) == sorted(sent)
    pseudonym = device_pseudonym(spec.name, "phone-17")
    assert {key for key, _, _ in received} == {pseudonym_key(pseudonym)}
    for _, value, _ in received:
        decoded = decode(value)  # type: ignore[arg-type]
        assert decoded.collection == spec.name and decoded.devices.tolist() == [pseudonym]
        assert len(decoded.attributes) == 1  # k = 1 at eps = 2 (000 Eq. 12)
    assert sorted(decode(v).timestamps_ms[0] for _, v, _ in received) == [T0 + 1000, T0 + HOUR_MS]  # type: ignore[arg-type]


@pytest.mark.parametrize("single", [False, True])
def test_simulated_fleet_arrives_whole(live_services: Settings, single: bool, topics: list[str]) -> None:
    spec = fresh_spec(live_services.bootstrap, "fleet", topics)
    producer = ReportProducer(live_services.bootstrap)
    result = simulate(spec, 3000, producer, seed=4, batch=700, single=single)
    # batched: chunks of 700 x 2 partitions (1400, 1400, 200), each an envelope per partition
    assert result.reports == 3000 and producer.delivered == result.messages == (3000 if single else 6)
    devices = np.concatenate([decode(r.value).devices for r in read_to_end(live_services.bootstrap, spec.topic)])  # type: ignore[arg-type]
    assert len(devices) == 3000 and len(np.unique(devices)) == 3000
    assert result.truth["devices"] == 3000


def test_a_rate_limit_sends_smaller_chunks(live_services: Settings, topics: list[str]) -> None:
    """With --rate R a chunk holds at most R/10 devices, so the fleet is paced in tenths of a second."""
    spec = fresh_spec(live_services.bootstrap, "rate", topics)
    result = simulate(spec, 50, ReportProducer(live_services.bootstrap), batch=1000, rate=200)
    assert result.messages == 6 and result.reports == 50  # chunks of 20, 20, 10, each an envelope per partition
    with pytest.raises(ValueError, match="rate must be > 0"):
        simulate(spec, 50, ReportProducer(live_services.bootstrap), rate=0)


def test_flush_reports_undeliverable_messages() -> None:
    producer = ReportProducer("127.0.0.1:1", extra={"message.timeout.ms": 500})
    producer.produce("ldp.nowhere", b"x")
    with pytest.raises(DeliveryError, match=r"1 message\(s\) failed and 0 still queued"):
        producer.flush(5)
    assert producer.failed == 1 and producer.delivered == 0
