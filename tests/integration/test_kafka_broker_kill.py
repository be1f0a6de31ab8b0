"""A Kafka broker killed (SIGKILL, no controlled shutdown) mid-stream and started again: nothing lost, nothing
counted twice. The broker is the test's own (`fault_support.kafka_broker`); Redis is the shared one."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from fault_support import kafka_broker, kill_broker
from pipeline_support import assert_statistics_equal, published_collection, reference_run, send_in_background

from ldpstream.aggregator.processes import stop_worker
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration

DEVICES = 200_000


def test_a_broker_killed_mid_stream_loses_nothing_and_counts_nothing_twice(live_services: Settings,
                                                                             tmp_path: Path) -> None:
    with ExitStack() as stack:
        broker = stack.enter_context(kafka_broker(live_services, tmp_path / "state"))
        c = stack.enter_context(published_collection(replace(live_services, kafka_bootstrap=broker.address)))
        # the producer retries through the outage (idempotent: its retries add no duplicates)
        fleet = send_in_background(c, DEVICES, rate=25_000, seed=41,
                                   producer_config={"extra": {"message.timeout.ms": 180_000}})
        worker = c.start_worker(tmp_path / "worker.log")
        alive = lambda: worker.poll() is None  # noqa: E731
        try:
            assert c.wait_accepted(30_000, 120, alive) >= 30_000, "the stream did not start"
            kill_broker(broker)
            time.sleep(2)
            broker.start()
            result = fleet.join()
            assert result.reports == DEVICES
            assert c.wait_accepted(DEVICES, 240, alive) == DEVICES
        finally:
            stop_worker(worker)
        # the worker has exited: nothing more can arrive, and a replay counted twice would show here
        assert c.store.outcomes(c.spec.name) == {"accepted": DEVICES}
        assert_statistics_equal(c, reference_run(c))
