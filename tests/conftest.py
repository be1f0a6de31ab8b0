"""Fixtures shared by the whole suite: the running local services for integration tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
