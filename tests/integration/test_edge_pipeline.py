"""Devices -> edge (HTTP) -> Kafka -> aggregator -> Redis, with the real services and a real edge process."""

from __future__ import annotations

import time

import pytest
from edge_support import EdgeProcess
from pipeline_support import Collection, assert_within_stderr

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.edge.devices import DeviceRegistry
from ldpstream.simulator.edge_client import send_fleet

pytestmark = pytest.mark.integration

# Every request a device's own; the count must be exact and every estimate within 4 of its own standard errors,
# which the estimates compute for this n: a bias shows at 20k devices as it does at 100k (64 requests in flight).
DEVICES = 20_000


def test_20k_enrolled_devices_through_the_edge_count_exact_and_estimates_within_4_stderr(
        collection: Collection, edge: EdgeProcess, enrolled: DeviceRegistry) -> None:
    credentials = enrolled.enroll(collection.spec.name, DEVICES)
    worker = start_worker(collection.group)
    try:
        started = time.perf_counter()
        result, answers = send_fleet(collection.spec, credentials, edge.url, seed=3, concurrency=64)
        print(f"\n{DEVICES} requests through the edge in {time.perf_counter() - started:.1f} s: {answers.statuses}")
        assert answers.statuses == {200: DEVICES}
        assert collection.wait_accepted(DEVICES, 180, lambda: worker.poll() is None) == DEVICES
        time.sleep(1.0)  # nothing more arrives: the count is exact, not at least
        assert collection.accepted() == DEVICES
    finally:
        stop_worker(worker)
    assert_within_stderr(collection.estimates(), result.truth)
