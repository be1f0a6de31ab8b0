"""`GET /collections/{name}/series` on a real socket: what it answers is `collection_series`, each window's estimates
are the estimates endpoint's for that window with the 95% interval beside them, and bad input is a clear 4xx (the
coverage of the intervals: `test_series_coverage.py`)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.shuffled import WindowFigures
from ldpstream.contract.spec import load_spec, parse_spec
from ldpstream.readapi.series import (
    MAX_POINTS,
    MAX_WINDOWS,
    Z95,
    SeriesError,
    SeriesQuery,
    collection_series,
    parse_time,
    series_query,
)
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from tests.readapi.series_support import SeriesApi, series_api, simulated_windows

MINUTE = 60_000


@pytest.fixture(scope="module")
def api(live_services: Settings) -> Iterator[SeriesApi]:
    with series_api(live_services, count=30, every=2) as served:  # a window every other minute: gaps between
        yield served


def test_the_series_is_every_window_in_the_range_with_estimates_intervals_and_privacy(api: SeriesApi) -> None:
    starts = api.windows.starts
    got = api.json(f"/collections/{api.name}/series?attribute=network_type&window=1m&from={starts[3]}"
                   f"&to={starts[-3] + 1}")
    plan = Plan(api.windows.spec)
    assert got == collection_series(api.windows.store, plan, SeriesQuery("network_type", "1m", starts[3],
                                                                         starts[-3] + 1))
    assert [w["start_ms"] for w in got["windows"]] == starts[3:-2]  # the minutes between hold no reports: absent
    assert (got["type"], got["description"], got["values"]) == ("categorical", "Connection in use",
                                                                ["wifi", "5g", "4g", "3g", "offline"])
    assert got["privacy"]["per_report"] == api.windows.spec.epsilon and got["confidence"] == 0.95
    for window in got["windows"]:
        assert window["end_ms"] - window["start_ms"] == MINUTE and window["reports"] == 300
        assert window["privacy"] == {"epsilon": api.windows.spec.epsilon, "central": None}
        expected = collection_estimates(api.windows.store, plan, f"1m:{window['start_ms']}")
        assert window["sampled"] > 0
        for value, point in window["estimates"]["frequencies"].items():
            same = expected["attributes"]["network_type"]["frequencies"][value]
            assert (point["estimate"], point["stderr"]) == (same["estimate"], same["stderr"])
            assert point["low"] == pytest.approx(point["estimate"] - Z95 * point["stderr"], rel=1e-12)
            assert point["high"] == pytest.approx(point["estimate"] + Z95 * point["stderr"], rel=1e-12)


def test_a_numeric_attribute_has_its_mean_unit_and_interval(api: SeriesApi) -> None:
    got = api.json(f"/collections/{api.name}/series?attribute=battery_level")
    assert (got["unit"], got["window"], got["type"]) == ("%", "1m", "numeric")
    assert [w["start_ms"] for w in got["windows"]] == api.windows.starts[-24:]  # default: the 48 newest minutes
    mean = got["windows"][-1]["estimates"]["mean"]
    assert mean["low"] < mean["estimate"] < mean["high"]


def test_times_may_be_iso_8601(api: SeriesApi) -> None:
    first, last = api.windows.starts[0], api.windows.starts[-1]
    iso = [datetime.fromtimestamp(t / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (first, last + MINUTE)]
    got = api.json(f"/collections/{api.name}/series?attribute=os_version&from={iso[0]}&to={iso[1]}")
    assert [w["start_ms"] for w in got["windows"]] == api.windows.starts
    assert parse_time("1970-01-01T01:00:00+01:00", "from") == 0 and parse_time("1970-01-02", "from") == 86_400_000


def test_a_range_without_reports_is_an_empty_series(api: SeriesApi) -> None:
    got = api.json(f"/collections/{api.name}/series?attribute=os_version&window=1h&from=0&to=3600000")
    assert got["windows"] == []


@pytest.mark.parametrize("query, status, message", [
    ("attribute=nothing", 404, "has no attribute 'nothing' (attributes: battery_level, "),
    ("", 400, "name an attribute: attribute=one of battery_level, "),
    ("attribute=os_version&window=2h", 400, "window '2h' is not one of"),
    ("attribute=os_version&window=all", 400, "window 'all' is not one of"),
    ("attribute=os_version&from=5000&to=5000", 400, "an empty range: from (5000) must be before to (5000)"),
    ("attribute=os_version&from=60001&to=119999", 400, "no 1m window starts in [60001, 119999)"),
    ("attribute=os_version&from=0", 400, "windows; a series has at most 1,000: narrow the range or take a longer"),
    ("attribute=os_version&from=yesterday", 400, "from must be milliseconds since the epoch (digits) or an ISO 8601"),
    ("attribute=os_version&to=2024-13-01", 400, "to '2024-13-01' is not a date"),
    ("attribute=os_version&version=2", 404, "has no published version 2"),
])
def test_bad_input_is_a_clear_4xx(api: SeriesApi, query: str, status: int, message: str) -> None:
    assert message in api.json(f"/collections/{api.name}/series?{query}", status=status)["error"]


def test_an_unknown_collection_is_404(api: SeriesApi) -> None:
    assert "no published collection 'nowhere'" in api.json("/collections/nowhere/series", status=404)["error"]


def test_the_series_needs_a_token_with_scope_read(api: SeriesApi) -> None:
    path = f"/collections/{api.name}/series?attribute=os_version"
    assert api.get(path, token=None)[0] == 401
    assert api.get(path, token="not-a-token")[0] == 401
    assert api.get(path, token=api.metrics_token)[0] == 403


def test_the_bounds_hold_before_anything_is_read() -> None:
    spec = parse_spec("{name: s, version: 1, epsilon: 2, windows: [1s], attributes: [{name: w, type: string, "
                      "max_length: 8, top: 1000}, {name: x, type: numeric, range: [0, 1]}]}")
    plan = Plan(spec)
    assert series_query(plan, "w", None, "0", str(200 * 1000), 10**12).window_count == MAX_POINTS // 1000
    with pytest.raises(SeriesError, match="asks 201,000 estimates"):
        series_query(plan, "w", None, "0", str(201 * 1000), 10**12)
    assert series_query(plan, "x", "1s", "1", str(MAX_WINDOWS * 1000 + 1), 10**12).window_count == MAX_WINDOWS
    with pytest.raises(SeriesError, match="spans 1,001 1s windows"):
        series_query(plan, "x", "1s", "0", str(MAX_WINDOWS * 1000 + 1), 10**12)
    only_all = parse_spec("{name: s, version: 1, epsilon: 2, windows: [], attributes: [{name: x, type: numeric, "
                          "range: [0, 1]}]}")
    with pytest.raises(SeriesError, match="keeps only the all-time window"):
        series_query(Plan(only_all), None, None, None, None, 10**12)


ODD = st.one_of(st.text(max_size=30), st.sampled_from([
    "0", "-1", "²", "1e3", "9" * 5000, "2024-02-30", "2024-01-01T25:00", "0000-01-01", "9999-12-31T23:59:59+23:59",
    "1h", "1m", "all", "battery_level", "network_type", "\x00", "2024-01-01T00:00:00.1234567Z"]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["attribute", "window", "from", "to", "version", "x"]), ODD), max_size=5),
       st.sampled_from(["{name}", "nowhere", "%ff", "a%2Fb"]))
def test_no_query_string_makes_the_series_fail_with_a_500(api: SeriesApi, params: list[tuple[str, str]],
                                                          name: str) -> None:
    path = urllib.parse.quote(f"/collections/{name.format(name=api.name)}/series", safe="/%")
    status, _, body = api.get(f"{path}?{urllib.parse.urlencode(params)}")
    assert status in (200, 400, 404), body


class ShuffledStore(MemoryStore):
    """A MemoryStore with the figures a shuffler published (the Redis store reads them from `figures_key`)."""

    def __init__(self, figures: list[WindowFigures]) -> None:
        super().__init__()
        self.figures = figures

    def shuffle_figures(self, collection: str) -> list[WindowFigures]:
        return self.figures


def test_a_shuffled_collection_s_windows_carry_their_central_epsilon() -> None:
    spec = load_spec(PROJECT_ROOT / "examples" / "shuffled.yaml").replace(partitions=1, windows=["1m"])
    start = 1_700_000_040_000 // MINUTE * MINUTE

    def batch(window_ms: int, epsilon: float, version: int = 1) -> WindowFigures:
        return WindowFigures(version, window_ms, 20_000, 0, 4.0, epsilon, 1e-8, "grr", window_ms + 70_000)

    store = ShuffledStore([batch(start, 0.31), batch(start + MINUTE, 0.25), batch(start + MINUTE, 0.4, version=2)])
    windows = simulated_windows(spec, start, 3, 200, store=store)
    got = collection_series(windows.store, Plan(spec), SeriesQuery("category", "1m", start, start + 3 * MINUTE))
    assert got["privacy"]["shuffled"] == {"delta": 1e-8, "min_batch": 10_000}
    assert [w["privacy"] for w in got["windows"]] == [
        {"epsilon": 4.0, "central": {"epsilon": 0.31, "delta": 1e-8, "batches": 1, "reports": 20_000}},
        {"epsilon": 4.0, "central": {"epsilon": 0.25, "delta": 1e-8, "batches": 1, "reports": 20_000}},
        {"epsilon": 4.0, "central": None}]  # not released yet; version 2's batch is another spec's
