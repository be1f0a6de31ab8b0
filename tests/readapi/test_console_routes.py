"""The console's routes: open, static, each file with its type and a Content-Security-Policy that allows only this
origin's scripts and styles; nothing but the listed files is reachable (the pages in Chromium:
tests/integration/test_console.py)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from ldpstream.readapi.console import FILES, HEADERS, STATIC
from ldpstream.runtime.settings import Settings
from tests.readapi.series_support import SeriesApi, series_api


@pytest.fixture(scope="module")
def api(live_services: Settings) -> Iterator[SeriesApi]:
    with series_api(live_services, count=1, devices=100) as served:
        yield served


def headers_of(url: str) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, dict(response.headers), response.read()


@pytest.mark.parametrize("path, content_type, file", [
    ("/console/", "text/html", "index.html"),
    ("/console/collection?name=x", "text/html", "collection.html"),
    ("/console/job?name=x", "text/html", "job.html"),
    ("/", "text/html", "index.html"),  # a redirect followed
    *[(f"/console/static/{name}", content_type, path) for name, (path, content_type) in FILES.items()],
])
def test_each_file_is_served_open_with_its_type_and_policy(api: SeriesApi, path: str, content_type: str,
                                                            file: str) -> None:
    status, headers, body = headers_of(api.url + path)
    assert status == 200 and headers["Content-Type"] == f"{content_type}; charset=utf-8"
    assert body == (STATIC / file).read_bytes()
    for name, value in HEADERS.items():
        assert headers[name] == value
    assert "script-src 'self';" in headers["Content-Security-Policy"]


@pytest.mark.parametrize("name", ["..%2Fconsole.py", "index.html", "vendor%2FuPlot.LICENSE", "%00", "console.js.map"])
def test_nothing_else_is_reachable(api: SeriesApi, name: str) -> None:
    status, _, body = api.get(f"/console/static/{name}", token=None)
    assert status == 404 and "error" in body


def test_the_pages_hold_no_inline_script_or_style() -> None:
    for page in ("index.html", "collection.html", "job.html"):
        text = (STATIC / page).read_text()
        assert "<script>" not in text and "<style" not in text and "style=" not in text and "onclick" not in text
