"""Fixtures of the integration tests: a fresh published collection per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_support import EdgeProcess, free_port
from pipeline_support import Collection

from aggregator.store import RedisStore
from collection.spec import load_spec
from edge.devices import DeviceRegistry, master_key
from edge.processes import start_edge, stop_edge, wait_live
from runtime.kafka import delete_topic
from runtime.redis import redis_client
from runtime.settings import PROJECT_ROOT, Settings
from runtime.specs import publish_spec


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    """The diagnostics spec published under a unique name; its Redis keys and topic are removed afterwards."""
    base = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
    name = f"it-{uuid.uuid4().hex[:10]}"
    spec = base.model_copy(update={"name": name})
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    yield Collection(live_services, spec, store, f"it-group-{name}")
    store.delete_collection(name)
    try:
        delete_topic(live_services.bootstrap, spec.topic)
    except Exception:  # noqa: BLE001 - cleanup only: a broker restart test may leave the topic busy
        pass


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    """An edge process of its own (`python -m edge`) on a free port, with its spool in tmp_path."""
    port = free_port()
    proc = start_edge(port, tmp_path / "spool", log_file=tmp_path / "edge.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_live(url, proc)
        yield EdgeProcess(url, proc, tmp_path / "spool", port)
    finally:
        stop_edge(proc)


@pytest.fixture
def enrolled(live_services: Settings, collection: Collection) -> Iterator[DeviceRegistry]:
    """The registry devices of the test's collection are enrolled in (cleared after the test)."""
    client = redis_client(live_services.redis)
    yield DeviceRegistry(client, master_key(live_services.edge_key, create=True))
    keys = list(client.scan_iter(f"ldp:edge:{collection.spec.name}:*", count=10_000))
    for lo in range(0, len(keys), 10_000):
        client.delete(*keys[lo:lo + 10_000])
