"""A real browser: Debian's Chromium, headless (playwright-core; no browser download), loads the example page
(examples/web/), which joins a collection through the real edge (CORS for the page's origin), reports and sends; the
aggregator counts its report. Reloaded, the page is the same device (its credential, ledger and outbox in IndexedDB):
it enrols nothing new, its spent budget stands (a second report in the window is refused), and its secret, from which
its memoized answers are read, is the same. Screenshots of both
visits are kept under tests/typescript/artifacts/ (git-ignored). CI gets Chromium from Debian (`make install-test`
runs `apt-get install -y chromium` when /usr/bin/chromium is missing)."""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from edge_support import EdgeProcess, free_port, running_edge
from pipeline_support import Collection
from ts_support import HERE, ROOT, run_node

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.spec import parse_spec
from ldpstream.edge.devices import devices_keys
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec

pytestmark = pytest.mark.integration

ARTIFACTS = HERE / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
# A lifetime budget: its attributes are memoized (1BitMean and a two-stage oracle, loaded by the page on demand) and
# their permanent answers are read from the device's secret, which must survive the reload.
SPEC = {"version": 1, "privacy": {"per_report": 1.0, "lifetime": 2.0}, "windows": ["1h"], "one_report_per_window": True,
        "attributes": [{"name": "battery_level", "type": "numeric", "range": [0, 100]},
                       {"name": "network_type", "type": "categorical", "values": ["wifi", "5g", "4g", "offline"]}]}


class PageServer:
    """The repository's files over HTTP (the page and the SDK's bundle), with the test's pinned keys as
    examples/web/keys.json."""

    def __init__(self, keys: dict[str, Any]) -> None:
        body = json.dumps(keys).encode()

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if urllib.parse.urlsplit(self.path).path == "/examples/web/keys.json":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), partial(Handler, directory=str(ROOT)))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    spec = parse_spec(json.dumps({**SPEC, "name": f"web-{uuid.uuid4().hex[:10]}"}))
    publish_spec(spec, live_services.bootstrap)
    yield Collection(live_services, spec, RedisStore(live_services.redis), f"ldp-aggregator-it-{spec.name}")
    RedisStore(live_services.redis, timeout_s=5.0).delete_collection(spec.name)
    delete_topic(live_services.bootstrap, spec.topic)


@pytest.fixture
def pages(live_services: Settings) -> Iterator[PageServer]:
    server = PageServer(pinned_keys(live_services))
    yield server
    server.close()


@pytest.fixture
def edge(pages: PageServer, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--cors-origin", pages.origin, "--enrol-per-address", "1000000")


def test_a_page_in_chromium_joins_reports_and_survives_a_reload(collection: Collection, pages: PageServer,
                                                                edge: EdgeProcess, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), "Chromium is missing: `apt-get install -y chromium` (make install-test does it)"
    cfg, name = collection.cfg, collection.spec.name
    token = mint(load_token_key(cfg), new_token([name], 5, now_ms(), now_ms() + 600_000))
    query = urllib.parse.urlencode({"edge": edge.url, "collection": name, "token": token, "auto": "1"})
    url = f"{pages.origin}/examples/web/index.html?{query}"
    ARTIFACTS.mkdir(exist_ok=True)
    worker = collection.start_worker(log_file=tmp_path / "worker.log")
    try:
        seen = json.loads(run_node(HERE / "browser.mjs", url, str(ARTIFACTS), timeout=300).stdout)
        first, reloaded = seen["first"], seen["reloaded"]
        assert first["state"] == "sent", seen
        assert first["pending"] == "0" and float(first["spent"]) == pytest.approx(1.0), seen
        assert first["memo"]["memos"] and first["memo"]["lifetime_spent"] > 0, seen
        # the same device after a reload: its credential (no new enrolment), its ledger (the window's budget spent)
        assert reloaded["state"] == "budget" and "BudgetExceeded" in reloaded["text"], seen
        assert reloaded["pseudonym"] == first["pseudonym"] and reloaded["spent"] == first["spent"], seen
        assert reloaded["memo"] == first["memo"], seen  # the same secret (memo table), the same memos paid for
        assert collection.wait_accepted(1, timeout_s=60) == 1
        assert collection.store.outcomes(name) == {"accepted": 1}
        client = redis_client(cfg.redis)
        assert sum(client.hlen(key) for key in devices_keys(name)) == 1
    finally:
        worker.terminate()
        worker.wait(30)
    assert (ARTIFACTS / "browser-first-visit.png").stat().st_size > 0
    assert (ARTIFACTS / "browser-after-reload.png").stat().st_size > 0


def test_a_page_whose_origin_the_edge_does_not_allow_says_what_to_configure(
        collection: Collection, pages: PageServer, edge: EdgeProcess, live_services: Settings) -> None:
    other = PageServer(pinned_keys(live_services))  # another port: another origin, not the edge's --cors-origin
    try:
        query = urllib.parse.urlencode({"edge": edge.url, "collection": collection.spec.name, "token": "x"})
        seen = json.loads(run_node(HERE / "browser_status.mjs", f"{other.origin}/examples/web/index.html?{query}",
                                   timeout=120).stdout)
    finally:
        other.close()
    assert seen["state"] == "error", seen
    assert f"ldp edge --cors-origin {other.origin}" in seen["text"], seen
