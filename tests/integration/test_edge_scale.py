"""Several edge processes behind one port (SO_REUSEPORT), each with its own spool: one dying leaves the port
served, and every report acknowledged by either is counted once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from edge_support import free_port
from pipeline_support import Collection

from aggregator.processes import start_worker, stop_worker
from edge.devices import DeviceRegistry
from edge.processes import start_edge, stop_edge, wait_live
from producer.edge_client import fleet_requests, post_all

pytestmark = pytest.mark.integration


def test_two_edge_processes_share_a_port_and_survive_one_another(collection: Collection, enrolled: DeviceRegistry,
                                                                  tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    edges = [start_edge(port, tmp_path / f"spool-{i}", "--reuse-port", log_file=tmp_path / f"edge-{i}.log")
             for i in range(2)]
    requests, _ = fleet_requests(collection.spec, enrolled.enroll(collection.spec.name, 600), seed=21)
    worker = start_worker(collection.group)
    try:
        for proc in edges:
            wait_live(url, proc)
        assert asyncio.run(post_all(url, requests[:300], 16)).statuses == {200: 300}
        os.killpg(edges[0].pid, signal.SIGKILL)
        edges[0].wait()
        assert asyncio.run(post_all(url, requests[300:], 16)).statuses == {200: 300}
        assert collection.wait_accepted(600, 120, lambda: worker.poll() is None) == 600
    finally:
        stop_worker(worker)
        for proc in edges:
            stop_edge(proc)
