"""`ldp estimate --quantiles`: a distribution attribute's quantiles at the levels asked (the estimates of the window
otherwise unchanged); bad levels are exit 2 with one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from ldpstream.aggregator.estimates import attribute_distribution, collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import RedisStore
from ldpstream.cli.commands import app
from ldpstream.contract.clock import now_ms
from ldpstream.contract.spec import load_spec
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from tests.readapi.series_support import Windows, simulated_windows

runner = CliRunner()
MINUTE = 60_000


@pytest.fixture(scope="module")
def latency(live_services: Settings) -> Iterator[Windows]:
    """Two one-minute windows of examples/request_latency.yaml (request_ms: Square Wave) in the real Redis."""
    spec = load_spec(PROJECT_ROOT / "examples" / "request_latency.yaml").replace(
        name=f"test-quantiles-{uuid.uuid4().hex[:10]}", partitions=1, windows=["1m"])
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    try:
        yield simulated_windows(spec, (now_ms() // MINUTE - 1) * MINUTE, 2, 300, store=store)
    finally:
        store.delete_collection(spec.name)
        delete_topic(live_services.bootstrap, spec.topic)


def test_quantiles_at_the_levels_asked(latency: Windows) -> None:
    start = latency.starts[0]
    result = runner.invoke(app, ["estimate", latency.spec.name, "--window", f"1m:{start}", "--quantiles",
                                 "0.5,0.9,0.999", "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    plan, store = Plan(latency.spec), latency.store
    expected = attribute_distribution(store, plan, "request_ms", f"1m:{start}", (0.5, 0.9, 0.999))["distribution"]
    assert got["attributes"]["request_ms"]["distribution"] == expected
    assert list(expected["quantiles"]) == ["0.5", "0.9", "0.999"]
    plain = collection_estimates(store, plan, f"1m:{start}")
    assert got["attributes"]["network_type"] == plain["attributes"]["network_type"]
    table = runner.invoke(app, ["estimate", latency.spec.name, "--quantiles", "0.9"])
    assert table.exit_code == 0 and "quantile 0.9" in table.stdout and "quantile 0.5" not in table.stdout


@pytest.mark.parametrize("levels", ["1", "0", "abc", "", "0.5,", "nan", "-0.1"])
def test_bad_levels_are_exit_2_with_one_line(latency: Windows, levels: str) -> None:
    result = runner.invoke(app, ["estimate", latency.spec.name, "--quantiles", levels])
    assert result.exit_code == 2 and "--quantiles must be comma-separated levels in (0, 1)" in result.output
