"""Privacy over time, end to end over Kafka through a worker process: 20,000 devices with a memoized mechanism
report once an hour for 24 hours (each hour's estimates within 4 of their own standard errors, computed for this n;
every device's ledger checked).

The fleet (`ldpstream.simulator.simulator`, the same devices, records and secrets every round) sends each hour's reports
to Kafka, and a `python -m ldpstream.aggregator` worker process consumes them. The 24 hourly windows are the current
hour and the 23 after it: the worker is started with LDP_MAX_CLOCK_SKEW_S of 25 hours (`ldpstream.aggregator.__main__`),
so reports stamped up to a day ahead are counted, in their own windows, as they arrive (with the default 5 minutes they
would be dead letters, which the last test checks). Each device keeps its ledger (`ldpstream.device.ledger`), charged
with the memos its reports read (`ldpstream.device.perturb.report_memos`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from pipeline_support import Collection, published_collection

from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.processes import stop_worker
from ldpstream.contract.clock import now_ms
from ldpstream.contract.validation import FUTURE
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.perturb import report_memos
from ldpstream.runtime.kafka import ReportProducer
from ldpstream.runtime.settings import Settings
from ldpstream.simulator.population import PopulationTruth
from ldpstream.simulator.simulator import chunk_messages, fleet, simulated_secrets

pytestmark = pytest.mark.integration
DEVICES, HOURS, SEED, CHUNK = 20_000, 24, 11, 8_000
HOUR_MS = 3_600_000
DAY_AHEAD = {"LDP_MAX_CLOCK_SKEW_S": str(25 * 3600)}


@pytest.fixture
def memoized(live_services: Settings) -> Iterator[Collection]:
    """examples/app_lifetime.yaml (privacy: per_report 1, lifetime 4, values 2) published under a unique name."""
    with published_collection(live_services, "app_lifetime.yaml") as c:
        yield c


def send_hour(c: Collection, producer: ReportProducer, hour: int, at: int, ledgers: list[PrivacyLedger]) -> dict:
    """The reports of one hour of a fleet of len(ledgers) devices, stamped `at`, sent to Kafka; the ledgers charged;
    the hour's truth."""
    spec = c.spec
    truth = PopulationTruth(spec)
    for index, (records, reports) in enumerate(fleet(spec, len(ledgers), seed=SEED, chunk=CHUNK,
                                                     clock_ms=lambda: at, report_round=hour)):
        truth.add(records)
        lo = index * CHUNK
        memos = report_memos(spec, records, simulated_secrets(SEED, lo, len(reports)))
        for ledger, device_memos in zip(ledgers[lo:lo + len(reports)], memos, strict=True):
            ledger.charge(spec, at, memos=device_memos)
        for partition, key, message in chunk_messages(spec, reports, f"{spec.key}/{hour}/{index}"):
            producer.produce(spec.topic, message, key, partition)
    return truth.to_dict()


def test_24_hours_of_20k_memoized_devices_through_a_worker(memoized: Collection) -> None:
    c, spec = memoized, memoized.spec
    privacy = spec.privacy
    assert privacy is not None
    first_hour = now_ms() // HOUR_MS * HOUR_MS
    worker = c.start_worker(env=DAY_AHEAD)
    producer = ReportProducer(c.cfg.bootstrap)
    ledgers = [PrivacyLedger() for _ in range(DEVICES)]
    try:
        truths = [send_hour(c, producer, hour, first_hour + hour * HOUR_MS + 1_800_000, ledgers)  # half past
                  for hour in range(HOURS)]
        producer.flush(timeout_s=60.0)
        accepted = c.wait_accepted(DEVICES * HOURS, 120, lambda: worker.poll() is None)
    finally:
        stop_worker(worker)
    assert accepted == DEVICES * HOURS
    assert {k: v for k, v in c.store.outcomes(spec.name).items() if v} == {"accepted": accepted}  # no dead letter
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
    last = first_hour + (HOURS - 1) * HOUR_MS + 1_800_000
    assert all(ledger.spent(spec, last) == pytest.approx(spec.epsilon, rel=1e-12) for ledger in ledgers[:1000])


def test_a_worker_with_the_default_skew_refuses_the_next_hour(memoized: Collection) -> None:
    """Without the setting, reports stamped an hour ahead are dead letters (future_timestamp), none counted."""
    c, devices = memoized, 2_000
    worker = c.start_worker()
    producer = ReportProducer(c.cfg.bootstrap)
    outcomes: dict[str, int] = {}
    try:
        send_hour(c, producer, 0, now_ms() + HOUR_MS, [PrivacyLedger() for _ in range(devices)])
        producer.flush(timeout_s=60.0)
        deadline = time.monotonic() + 60
        while sum(outcomes.values()) < devices and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            outcomes = c.store.outcomes(c.spec.name)
    finally:
        stop_worker(worker)
    assert {k: v for k, v in outcomes.items() if v} == {f"rejected:{FUTURE}": devices}
