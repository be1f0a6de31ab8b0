"""Kafka -> faust agent -> Redis with the real services: every message counted exactly once."""

from __future__ import annotations

import pytest

from benchmarks.faust_probe import count_through_faust
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration


def test_10k_messages_round_trip_with_an_exact_count(live_services: Settings) -> None:
    result = count_through_faust(live_services, 10_000)
    assert result["counted"] == 10_000
