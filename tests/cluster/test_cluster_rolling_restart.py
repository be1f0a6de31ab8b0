"""A rolling restart of the 3 workers (each stopped with SIGTERM and started again, one after the other) while a
fleet streams through the cluster: every partition moves twice, and each report is counted exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_support import Workers, stream_through
from pipeline_support import assert_within_stderr, published_collection, send_in_background

from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.cluster

DEVICES = 300_000


def test_a_rolling_restart_of_every_worker_mid_stream_counts_each_report_once(cluster: Settings,
                                                                              tmp_path: Path) -> None:
    with published_collection(cluster) as c:
        workers = Workers(c, 3, tmp_path)
        fleet = send_in_background(c, DEVICES, rate=10_000, seed=53)

        def restart_each() -> None:
            for i in range(3):
                workers.restart(i)
                time.sleep(4)

        result = stream_through(c, workers, fleet, DEVICES, restart_each, started=20_000)
        assert_within_stderr(c.estimates(), result.truth)
