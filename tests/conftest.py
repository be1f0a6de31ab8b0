"""Fixtures shared by the whole suite: the running local services for integration tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import suppress

import pytest

from ldpstream.contract.topics import SPECS_TOPIC
from ldpstream.runtime.kafka import TopicError, delete_topic, metadata_answers
from ldpstream.runtime.redis import redis_answers
from ldpstream.runtime.settings import Settings

# Tests that move LDP_STATE_DIR (a fresh cache, a broker of their own) keep the running services' credentials, and
# so do the processes they start.
os.environ.setdefault("LDP_SECRETS_DIR", str(Settings.from_env().secrets_dir))


@pytest.fixture(scope="session")
def live_services() -> Settings:
    """The Kafka and Redis the project points at; fails (not skips) with a hint if they do not answer."""
    cfg = Settings.from_env()
    missing = [name for name, ok in (("Kafka at " + cfg.bootstrap, metadata_answers(cfg.bootstrap, 10.0)),
                                     ("Redis at " + cfg.redis, redis_answers(cfg.redis))) if not ok]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not answering: run `ldp up` (or `make test`, which does it)")
    return cfg


@pytest.fixture(scope="module", autouse=True)
def specs_topic_of_the_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module that uses the running services publishes its collection specs to a specs topic of its own,
    `ldp.collections.test-<id>` (`LDP_SPECS_TOPIC`, inherited by every process its tests start; the prefix the
    readers' ACLs allow, as benchmarks/bench_pipeline.py does), removed afterwards. Every worker, edge, `ldp serve`
    and publish reads and parses each spec of its specs topic when it starts, and a worker subscribes to each one's
    report topic: in the shared topic, that was every spec the session had published so far."""
    module_items = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    if not any("live_services" in getattr(item, "fixturenames", ()) for item in module_items):
        yield
        return
    topic = f"{SPECS_TOPIC}.test-{uuid.uuid4().hex[:10]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LDP_SPECS_TOPIC", topic)
        yield
    with suppress(Exception):  # cleanup only: the services may be gone
        delete_topic(Settings.from_env().bootstrap, topic)


@pytest.fixture
def topics(live_services: Settings) -> Iterator[list[str]]:
    """Names of topics a test creates; deleted after the test."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            delete_topic(live_services.bootstrap, name)
        except TopicError:
            pass  # already gone, or never created because the test failed first


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the running services (the `live_services` fixture, directly or through another fixture) is
    an integration test, whatever its module says: `make check` (-m 'not integration') runs without them."""
    for item in items:
        if "live_services" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
