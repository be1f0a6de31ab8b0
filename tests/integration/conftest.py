"""Fixtures of the integration tests: a fresh published collection per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pipeline_support import Collection, published_collection

from runtime.settings import Settings


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    """The diagnostics spec published under a unique name; its Redis keys and topic are removed afterwards."""
    with published_collection(live_services) as c:
        yield c
