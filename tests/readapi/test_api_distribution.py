"""`GET /collections/{name}/distribution` on a real socket: what it answers is `attribute_distribution` (one numeric
attribute's grid, density, CDF and quantiles at the levels asked, with standard errors), and bad input is a clear
JSON 4xx, never a 500."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ldpstream
from ldpstream.aggregator.estimates import attribute_distribution, collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.client import DISTRIBUTION_COLUMNS, ClientError, level_parameter, quantile_frame
from ldpstream.mechanisms.distribution.base import DEFAULT_QUANTILES
from ldpstream.readapi.api import MAX_QUANTILES
from ldpstream.runtime.settings import Settings
from tests.readapi.series_support import SeriesApi, series_api


@pytest.fixture(scope="module")
def latency(live_services: Settings) -> Iterator[SeriesApi]:
    """examples/request_latency.yaml (request_ms: Square Wave + EMS; network_type: categorical), 3 minutes of data."""
    with series_api(live_services, count=3, devices=400, example="request_latency.yaml") as served:
        yield served


@pytest.fixture(scope="module")
def diagnostics(live_services: Settings) -> Iterator[SeriesApi]:
    """examples/diagnostics.yaml: battery_level is numeric with a mean-only mechanism."""
    with series_api(live_services, count=1, devices=100) as served:
        yield served


def path(api: SeriesApi, query: str) -> str:
    return f"/collections/{api.name}/distribution?{query}"


def test_the_distribution_is_attribute_distribution_as_json(latency: SeriesApi) -> None:
    plan, store = Plan(latency.windows.spec), latency.windows.store
    got = latency.json(path(latency, "attribute=request_ms"))
    assert got == attribute_distribution(store, plan, "request_ms")
    assert (got["collection"], got["version"], got["window"], got["attribute"]) == (latency.name, 1, "all",
                                                                                    "request_ms")
    dist = got["distribution"]
    assert list(dist["quantiles"]) == [f"{q:g}" for q in DEFAULT_QUANTILES]
    assert dist["grid"][0] == 0 and dist["grid"][-1] == 2000 and len(dist["grid"]) == 65
    assert len(dist["density"]) == len(dist["probabilities"]) == 64
    assert len(dist["cdf"]) == len(dist["cdf_stderr"]) == 65
    assert dist["cdf"][-1] == pytest.approx(1.0, abs=1e-6) and dist["reports"] > 0
    # the all-time entry of the estimates carries the same distribution
    assert collection_estimates(store, plan)["attributes"]["request_ms"]["distribution"] == dist


def test_quantile_levels_and_a_window_may_be_chosen(latency: SeriesApi) -> None:
    plan, store, start = Plan(latency.windows.spec), latency.windows.store, latency.windows.starts[0]
    got = latency.json(path(latency, f"attribute=request_ms&window=1m:{start}&quantiles=0.1,%20.5,0.9&version=1"))
    assert got == attribute_distribution(store, plan, "request_ms", f"1m:{start}", (0.1, 0.5, 0.9))
    assert got["window"] == f"1m:{start}" and got["window_start_ms"] == start
    quantiles = got["distribution"]["quantiles"]
    assert list(quantiles) == ["0.1", "0.5", "0.9"]
    assert quantiles["0.1"]["estimate"] <= quantiles["0.5"]["estimate"] <= quantiles["0.9"]["estimate"]
    newest = latency.json(path(latency, "attribute=request_ms&window=1m"))
    assert newest["window"] == f"1m:{latency.windows.starts[-1]}"


def test_a_window_without_reports_has_a_null_distribution(latency: SeriesApi) -> None:
    got = latency.json(path(latency, "attribute=request_ms&window=1m:60000"))
    assert (got["window_start_ms"], got["distribution"]) == (60000, None)


@pytest.mark.parametrize("query, message", [
    ("", "attribute is required"),
    ("attribute=", "attribute is required"),
    ("attribute=nothing", "has no attribute 'nothing'"),
    ("attribute=network_type", "is categorical: distributions and quantiles are estimated for numeric attributes"),
    ("attribute=request_ms&quantiles=0", "quantiles are comma-separated levels strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=1", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=1.5", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=-0.1", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=nan", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=inf", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=1e-1", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=0.5,", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=%C2%B2", "strictly between 0 and 1"),
    ("attribute=request_ms&quantiles=" + ",".join(["0.5"] * (MAX_QUANTILES + 1)), f"at most {MAX_QUANTILES} levels"),
    ("attribute=request_ms&window=2h", "window '2h' is not one of"),
    ("attribute=request_ms&window=1m:1000", "the start of a 1m window is a multiple of 60000 ms"),
    ("attribute=request_ms&window=all:0", "the all-time window has no start"),
    ("attribute=request_ms&version=one", "version must be a positive integer"),
])
def test_bad_parameters_are_400_with_a_clear_json_error(latency: SeriesApi, query: str, message: str) -> None:
    assert message in latency.json(path(latency, query), status=400)["error"]


def test_a_numeric_attribute_with_a_mean_only_mechanism_is_400(diagnostics: SeriesApi) -> None:
    error = diagnostics.json(path(diagnostics, "attribute=battery_level"), status=400)["error"]
    assert "which gives its mean only" in error and "mechanism: sw" in error


@pytest.mark.parametrize("route, message", [
    ("/collections/no-such-collection/distribution?attribute=request_ms", "no published collection"),
    ("{path}&version=7", "has no published version 7 (published: 1)"),
])
def test_an_unknown_collection_or_version_is_404(latency: SeriesApi, route: str, message: str) -> None:
    got = latency.json(route.format(path=path(latency, "attribute=request_ms")), status=404)
    assert message in got["error"]


def test_the_route_needs_a_read_token(latency: SeriesApi) -> None:
    assert latency.get(path(latency, "attribute=request_ms"), None)[0] == 401
    assert latency.get(path(latency, "attribute=request_ms"), "not-a-token")[0] == 401
    assert latency.get(path(latency, "attribute=request_ms"), latency.metrics_token)[0] == 403


ODD = st.one_of(st.text(max_size=20), st.sampled_from(
    ["0.5", ".5", "0.5,0.9", "0", "1", "²", "0.٥", "1e-3", "0x1", "-0", "0.5,,0.9", " ", "9" * 5000, "0." + "9" * 40,
     "request_ms", "network_type", "1m", "1m:0", "1m:²", "all", "\x00"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["attribute", "quantiles", "window", "version"]), ODD), max_size=4))
def test_no_query_string_makes_it_fail_with_a_500(latency: SeriesApi, params: list[tuple[str, str]]) -> None:
    status, content_type, body = latency.get(f"/collections/{latency.name}/distribution?"
                                             f"{urllib.parse.urlencode(params)}")
    assert status in (200, 400, 404), body
    if content_type == "application/json":
        assert status == 200 or "error" in json.loads(body)
    else:  # aiohttp's own answer to a request line over 8190 bytes
        assert status == 400 and body.startswith("Got more than 8190 bytes"), body


def test_the_client_gives_the_grid_as_a_dataframe_and_the_quantiles_beside_it(latency: SeriesApi,
                                                                              tmp_path: pytest.TempPathFactory) -> None:
    client = ldpstream.Client(latency.url, latency.token)
    start = latency.windows.starts[1]
    frame = client.distribution(latency.name, "request_ms", window=f"1m:{start}", quantiles=[0.5, 0.9, 0.99, 1e-5])
    document = latency.json(path(latency, f"attribute=request_ms&window=1m:{start}&quantiles=0.5,0.9,0.99,0.00001"))
    dist = document["distribution"]
    assert list(frame.columns) == list(DISTRIBUTION_COLUMNS) and len(frame) == 64
    assert frame["lower"].tolist() == dist["grid"][:-1] and frame["upper"].tolist() == dist["grid"][1:]
    assert frame["density"].tolist() == dist["density"] and frame["probability"].tolist() == dist["probabilities"]
    assert frame["cdf"].tolist() == dist["cdf"][1:] and frame["cdf_stderr"].tolist() == dist["cdf_stderr"][1:]
    assert (frame.attrs["collection"], frame.attrs["attribute"], frame.attrs["window"]) == (
        latency.name, "request_ms", f"1m:{start}")
    assert (frame.attrs["reports"], frame.attrs["mean"]) == (dist["reports"], dist["mean"]["estimate"])
    quantiles = quantile_frame(frame)
    assert quantiles.index.tolist() == [0.5, 0.9, 0.99, 1e-5] and list(quantiles.columns) == ["estimate", "stderr"]
    assert quantiles.loc[0.9, "estimate"] == dist["quantiles"]["0.9"]["estimate"]
    assert quantiles.loc[0.5, "stderr"] == dist["quantiles"]["0.5"]["stderr"]
    default = client.distribution(latency.name, "request_ms")
    assert len(quantile_frame(default)) == 7 and default.attrs["window"] == "all"
    target = tmp_path / "latency.parquet"  # type: ignore[operator]
    frame.to_parquet(target, engine="pyarrow", index=False)
    back = pd.read_parquet(target)
    pd.testing.assert_frame_equal(back, frame)
    assert quantile_frame(back).equals(quantiles)


def test_the_client_frame_of_a_window_without_reports_is_empty(latency: SeriesApi) -> None:
    frame = ldpstream.Client(latency.url, latency.token).distribution(latency.name, "request_ms", window="1m:60000")
    assert frame.empty and list(frame.columns) == list(DISTRIBUTION_COLUMNS)
    assert (frame.attrs["reports"], frame.attrs["quantiles"]) == (0, []) and quantile_frame(frame).empty


def test_the_client_says_why_a_distribution_was_refused(latency: SeriesApi) -> None:
    client = ldpstream.Client(latency.url, latency.token)
    with pytest.raises(ClientError, match="400: .*is categorical") as refused:
        client.distribution(latency.name, "network_type")
    assert refused.value.status == 400
    with pytest.raises(ClientError, match="400: quantiles are comma-separated levels"):
        client.distribution(latency.name, "request_ms", quantiles=[0.5, 1.0])
    with pytest.raises(ClientError, match="404: no published collection"):
        client.distribution("no-such-collection", "request_ms")


@pytest.mark.parametrize("level, text", [(0.5, "0.5"), (0.99, "0.99"), (1e-5, "0.00001"), (0.0, "0.0"),
                                         (1, "1.0")])
def test_levels_are_sent_as_plain_decimals(level: float, text: str) -> None:
    assert level_parameter(level) == text
