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


def test_100k_enrolled_devices_through_the_edge_count_exact_and_estimates_within_4_stderr(
        collection: Collection, edge: EdgeProcess, enrolled: DeviceRegistry) -> None:
    devices = 100_000
    credentials = [c
                   for c in enrolled.enroll(collection.spec.name, devices)]
    worker = start_worker(collection.group)
    try:
        started = time.perf_counter()
        result, answers = send_fleet(collection.spec, credentials, edge.url, seed=3, concurrency=64)
        print(f"\n{devices} requests through the edge in {time.perf_counter() - started:.1f} s: {answers.statuses}")
        assert answers.statuses == {200: devices}
        assert collection.wait_accepted(devices, 180, lambda: worker.poll() is None) == devices
        time.sleep(1.0)  # nothing more arrives: the count is exact, not at least
        assert collection.accepted() == devices
    finally:
        stop_worker(worker)
    assert_within_stderr(collection.estimates(), result.truth)
