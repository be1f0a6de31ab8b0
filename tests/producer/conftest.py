"""Fixtures of the producer tests."""

from __future__ import annotations

import pytest

from producer.spec import CollectionSpec
from tests.producer.specs import mixed_spec


@pytest.fixture
def spec() -> CollectionSpec:
    return mixed_spec()
