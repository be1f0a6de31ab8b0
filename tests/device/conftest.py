"""Fixtures of the producer tests."""

from __future__ import annotations

import pytest

from ldpstream.contract.spec import CollectionSpec
from tests.specs import mixed_spec


@pytest.fixture
def spec() -> CollectionSpec:
    return mixed_spec()
