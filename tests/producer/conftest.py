"""Fixtures of the producer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ldpstream.services import ServicesConfig
from producer.kafka import TopicError, delete_topic
from producer.spec import CollectionSpec
from tests.producer.specs import mixed_spec


@pytest.fixture
def spec() -> CollectionSpec:
    return mixed_spec()


@pytest.fixture
def topics(live_services: ServicesConfig) -> Iterator[list[str]]:
    """Names of topics a test creates; deleted after the test."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            delete_topic(live_services.bootstrap, name)
        except TopicError:
            pass  # already gone, or never created because the test failed first
