"""The API's version summary states the privacy guarantees: per report, and over a device's lifetime."""

from __future__ import annotations

import pytest

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import load_spec
from ldpstream.readapi.api import version_summary
from ldpstream.runtime.settings import PROJECT_ROOT


@pytest.mark.parametrize(("example", "lifetime"), [("app_lifetime.yaml", 4.0), ("diagnostics.yaml", None)])
def test_versions_show_the_per_report_and_lifetime_guarantees(example: str, lifetime: float | None) -> None:
    spec = load_spec(PROJECT_ROOT / "examples" / example)
    privacy = version_summary(MemoryStore(), Plan(spec), [])["privacy"]
    assert privacy["per_report"] == spec.epsilon and privacy["lifetime"] == lifetime
    assert set(privacy["attributes"]) == {a.name for a in spec.attributes}
