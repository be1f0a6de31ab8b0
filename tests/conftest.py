"""Fixtures shared by the whole suite: the running local services for integration tests."""

from __future__ import annotations

import pytest

from ldpstream.services import ServicesConfig
from ldpstream.services.kafka import metadata_answers
from ldpstream.services.redis import redis_answers


@pytest.fixture(scope="session")
def live_services() -> ServicesConfig:
    """The Kafka and Redis the project points at; fails (not skips) with a hint if they do not answer."""
    cfg = ServicesConfig.from_env()
    missing = [name for name, ok in (("Kafka at " + cfg.bootstrap, metadata_answers(cfg.bootstrap, 10.0)),
                                     ("Redis at " + cfg.redis, redis_answers(cfg.redis))) if not ok]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not answering: run `ldp up` (or `make test`, which does it)")
    return cfg
