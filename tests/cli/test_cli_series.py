"""`ldp series` (from the local stack's Redis, or with --url through the read API) and `ldpstream.Client`: the same
document as the API's, as JSON, CSV, a terminal chart, a pandas DataFrame and a Parquet file."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator

import pandas as pd
import pytest
from typer.testing import CliRunner

import ldpstream
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import RedisStore
from ldpstream.cli.commands import app
from ldpstream.client import COLUMNS, ClientError
from ldpstream.contract.clock import now_ms
from ldpstream.contract.spec import load_spec
from ldpstream.readapi.series import SeriesQuery, collection_series
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from tests.readapi.series_support import SeriesApi, Windows, series_api, simulated_windows

runner = CliRunner()
MINUTE = 60_000


@pytest.fixture(scope="module")
def api(live_services: Settings) -> Iterator[SeriesApi]:
    with series_api(live_services, count=6, devices=300) as served:
        yield served


@pytest.fixture(scope="module")
def in_redis(live_services: Settings) -> Iterator[Windows]:
    """Six one-minute windows of a published spec in the real Redis (as workers leave them)."""
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"test-series-{uuid.uuid4().hex[:10]}", partitions=1, windows=["1m"])
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    try:
        yield simulated_windows(spec, (now_ms() // MINUTE - 5) * MINUTE, 6, 300, store=store)
    finally:
        store.delete_collection(spec.name)
        delete_topic(live_services.bootstrap, spec.topic)


def ldp(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_json_through_the_api_is_the_api_s_document(api: SeriesApi) -> None:
    path = f"/collections/{api.name}/series?attribute=display_mode"
    got = json.loads(ldp("series", api.name, "-a", "display_mode", "--url", api.url, "--token", api.token, "--json"))
    expected = api.json(path)
    for document in (got, expected):  # to: "now", a few ms apart; from: 48 windows before
        assert document.pop("from_ms") == (-(-document.pop("to_ms") // MINUTE) - 48) * MINUTE
    assert got == expected and len(got["windows"]) == 6


def test_json_from_the_local_stack_is_collection_series(in_redis: Windows) -> None:
    name, starts = in_redis.spec.name, in_redis.starts
    got = json.loads(ldp("series", name, "--attribute", "battery_level", "--from", str(starts[1]), "--to",
                         str(starts[-1]), "--json"))
    expected = collection_series(in_redis.store, Plan(in_redis.spec), SeriesQuery("battery_level", "1m", starts[1],
                                                                                   starts[-1]))
    assert got == json.loads(json.dumps(expected)) and len(got["windows"]) == 4


def test_csv_has_a_row_per_window_and_value(in_redis: Windows) -> None:
    rows = list(csv.DictReader(io.StringIO(ldp("series", in_redis.spec.name, "-a", "network_type", "--from", "1h",
                                               "--csv"))))
    assert len(rows) == 6 * 5 and list(rows[0]) == ["collection", "attribute", *COLUMNS]
    assert {r["label"] for r in rows} == {"wifi", "5g", "4g", "3g", "offline"}
    first = rows[0]
    assert first["start"].endswith("Z") and float(first["low"]) < float(first["estimate"]) < float(first["high"])


def test_the_terminal_chart_draws_each_window_s_interval(in_redis: Windows) -> None:
    out = ldp("series", in_redis.spec.name, "-a", "battery_level")
    assert "battery_level (%): mean per 1m window, 95% intervals" in out
    assert out.count("●") == 6 and out.count("├") == 6


def test_bad_input_is_one_line(in_redis: Windows, api: SeriesApi) -> None:
    for args, message in [
        (["series", in_redis.spec.name, "-a", "nothing"], "has no attribute 'nothing'"),
        (["series", in_redis.spec.name, "-a", "battery_level", "--from", "0"], "a series has at most 1,000"),
        (["series", api.name, "-a", "x", "--url", api.url, "--token", api.token], "404: collection"),
        (["series", api.name, "--url", api.url, "--token", "nope"], "401:"),
        (["series", api.name, "--url", api.url], "--url needs --token"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in result.output, result.output


def test_the_client_gives_a_dataframe_and_writes_parquet(api: SeriesApi, tmp_path: pytest.TempPathFactory) -> None:
    client = ldpstream.Client(api.url, api.token)
    assert api.name in {c["name"] for c in client.collections()}
    frame = client.series(api.name, "os_version", window="1m")
    document = api.json(f"/collections/{api.name}/series?attribute=os_version&window=1m")
    assert list(frame.columns) == list(COLUMNS) and len(frame) == 6 * 7
    assert frame["start"].dt.tz is not None and frame.attrs["unit"] is None and frame.attrs["window"] == "1m"
    newest = document["windows"][-1]
    row = frame[(frame["start"] == pd.Timestamp(newest["start_ms"], unit="ms", tz="UTC")) & (frame["label"] == "14")]
    assert row["estimate"].item() == newest["estimates"]["frequencies"]["14"]["estimate"]
    assert row["reports"].item() == newest["reports"]
    path = tmp_path / "os.parquet"  # type: ignore[operator]
    written = client.save_series(path, api.name, "os_version", start=api.windows.starts[0])
    back = pd.read_parquet(path)
    pd.testing.assert_frame_equal(back, written)
    assert back.attrs["attribute"] == "os_version"
    assert client.estimates(api.name)["reports"] == 6 * 300


def test_the_client_says_why_a_request_was_refused(api: SeriesApi) -> None:
    with pytest.raises(ClientError, match="404: collection .* has no attribute 'x'") as refused:
        ldpstream.Client(api.url, api.token).series(api.name, "x")
    assert refused.value.status == 404
    with pytest.raises(ClientError) as unauthorised:
        ldpstream.Client(api.url, "wrong").collections()
    assert unauthorised.value.status == 401
    with pytest.raises(ClientError, match="cannot reach"):
        ldpstream.Client("http://127.0.0.1:9", api.token, timeout_s=5).collections()
    with pytest.raises(ValueError, match="http"):
        ldpstream.Client("file:///etc/passwd", api.token)
