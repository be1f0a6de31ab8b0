"""Several edge processes behind one port (SO_REUSEPORT), each with its own spool: one dying leaves the port
served, and every report acknowledged by either is counted once."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from edge_support import free_port, self_signed_certificate
from pipeline_support import Collection
from tokens import api_tokens

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.edge.devices import DeviceRegistry
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.runtime.process import stop_pid
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.tokens import Scope
from ldpstream.simulator.edge_client import fleet_requests, post_all

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


def test_ldp_edge_serves_https_from_several_processes_with_one_metrics(collection: Collection,
                                                                       enrolled: DeviceRegistry,
                                                                       tmp_path: Path) -> None:
    """`ldp edge --workers 2 --tls-cert --tls-key`: requests over HTTPS (verified against the edge's certificate)
    reach both processes, and every scrape of /metrics (a token with the metrics scope: else 401/403), whichever
    process answers, counts them all."""
    cert, key = self_signed_certificate(tmp_path)
    tls = ssl.create_default_context(cafile=cert)
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    supervisor = subprocess.Popen([sys.executable, "-m", "ldpstream", "edge", "--port", str(port), "--workers", "2",
                                   "--tls-cert", str(cert), "--tls-key", str(key)], start_new_session=True)
    requests, _ = fleet_requests(collection.spec, enrolled.enroll(collection.spec.name, 200), seed=22)
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{url}/readyz", tls):
            assert time.monotonic() < deadline and supervisor.poll() is None, "the edge did not get ready"
            time.sleep(0.2)
        with pytest.raises(urllib.error.URLError):  # not the certificate it trusts: refused
            _answers(f"{url}/healthz", ssl.create_default_context())
        assert asyncio.run(post_all(url, requests, 16, tls=tls)).statuses == {200: 200}
        metrics_dir = Settings.from_env().state_dir / "edge" / "metrics" / str(port)
        assert len({f.stem.rsplit("_", 1)[-1] for f in metrics_dir.glob("counter_*.db")}) == 2  # two processes
        with api_tokens(collection.cfg.redis) as tokens:
            scrape = {"Authorization": f"Bearer {tokens.issue([Scope.METRICS]).token}"}
            read_only = {"Authorization": f"Bearer {tokens.issue([Scope.READ]).token}"}
            for headers, status in (({}, 401), (read_only, 403)):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(urllib.request.Request(f"{url}/metrics", headers=headers), context=tls,
                                           timeout=10)
                assert refused.value.code == status
            for _ in range(8):  # new connections: SO_REUSEPORT spreads them over the processes
                with urllib.request.urlopen(urllib.request.Request(f"{url}/metrics", headers=scrape), context=tls,
                                            timeout=10) as response:
                    text = response.read().decode()
                assert 'ldp_edge_requests_total{reason="",status="200"} 200.0' in text
                assert 'ldp_edge_reports_total{outcome="accepted",reason=""} 200.0' in text
    finally:
        stop_pid(supervisor.pid)


def _answers(url: str, tls: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url, context=tls, timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ssl.SSLError):
            raise
        return False
