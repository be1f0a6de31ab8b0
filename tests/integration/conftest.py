"""Fixtures of the integration tests: a fresh published collection per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pipeline_support import Collection

from aggregator.store import RedisStore
from collection.spec import load_spec
from runtime.kafka import delete_topic
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
