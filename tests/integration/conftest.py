"""Fixtures of the integration tests: a fresh published collection per test; an edge process; enrolled devices."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_support import EdgeProcess, running_edge
from pipeline_support import Collection, published_collection

from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    """The diagnostics spec published under a unique name; its Redis keys and topic are removed afterwards."""
    with published_collection(live_services) as c:
        yield c


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    """An edge process of its own (`python -m ldpstream.edge`) on a free port, with its spool in tmp_path."""
    yield from running_edge(tmp_path)


@pytest.fixture
def enrolled(live_services: Settings, collection: Collection) -> Iterator[DeviceRegistry]:
    """The registry devices of the test's collection are enrolled in (cleared after the test)."""
    client = redis_client(live_services.redis)
    yield DeviceRegistry(client, Keyring.create(live_services.edge_key))
    keys = list(client.scan_iter(edge_keys(collection.spec.name), count=10_000))
    for lo in range(0, len(keys), 10_000):
        client.delete(*keys[lo:lo + 10_000])
