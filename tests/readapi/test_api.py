"""The HTTP API on a real socket: published specs from the real Kafka, statistics in a MemoryStore, bearer tokens
in the real Redis (their checks: `test_api_auth.py`).

The fixture publishes a spec under a unique name, produces four messages to partition 0 of its topic (three fleet
chunks and one undecodable message) and aggregates the first three into the store, so the store holds known
reports, one rejection and a consumer lag of exactly one message.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan, PlanRegistry
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore, RedisStore
from ldpstream.contract.collector import resolved_mechanisms
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.contract.wire import encode
from ldpstream.readapi.api import PublishedPlans, TopicEnds, create_app
from ldpstream.runtime.kafka import delete_topic, metadata_answers, producer_client
from ldpstream.runtime.redis import async_redis_client, redis_answers
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.tokens import Scope, TokenVerifier
from ldpstream.simulator.simulator import fleet
from tests.tokens import api_tokens

CHUNK = 700
GARBAGE = b"\x93not an envelope"


@dataclass(frozen=True)
class Served:
    """A running API over a store with known contents."""

    url: str
    spec: CollectionSpec
    store: MemoryStore
    hour_start_ms: int
    token: str  # scopes read and metrics

    def get(self, path: str) -> tuple[int, str, str]:
        return http_get(self.url + path, self.token)

    def json(self, path: str, status: int = 200) -> Any:
        code, content_type, body = self.get(path)
        assert (code, content_type) == (status, "application/json"), body
        return json.loads(body)


def http_get(url: str, token: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET, with `Authorization: Bearer <token>` when a token is given."""
    request = urllib.request.Request(url, headers={} if token is None else {"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_content_type(), exc.read().decode()


def token_verifier(cfg: Settings) -> TokenVerifier:
    """A verifier of the tokens in the live Redis (the app that gets it closes it)."""
    return TokenVerifier(async_redis_client(cfg.redis, 5.0))


@contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """The app served on a free loopback port by an event loop in a thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(app)
    asyncio.run_coroutine_threadsafe(runner.setup(), loop).result(30)
    asyncio.run_coroutine_threadsafe(web.TCPSite(runner, "127.0.0.1", 0).start(), loop).result(30)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def aggregated_store(cfg: Settings, spec: CollectionSpec) -> tuple[MemoryStore, int]:
    """Produce [chunk, garbage, chunk, chunk] to partition 0 and apply the first three; (store, report time)."""
    now_ms = int(time.time() * 1000)
    chunks = [encode(reports) for _, reports in fleet(spec, 3 * CHUNK, chunk=CHUNK, clock_ms=lambda: now_ms)]
    values = [chunks[0], GARBAGE, chunks[1], chunks[2]]
    producer = producer_client(cfg.bootstrap)
    for value in values:
        producer.produce(spec.topic, value, partition=0)
    assert producer.flush(30) == 0
    store = MemoryStore()
    plan = Plan(spec)
    processor = PartitionProcessor(lambda name, version, _: plan if (name, version) == (spec.name, spec.version)  # type: ignore[arg-type, return-value]
                                   else None, lambda: int(time.time() * 1000))
    result = processor.process(spec.topic, [Message(i, v) for i, v in enumerate(values[:3])])
    assert result.update is not None and store.apply(result.update).status == "applied"
    return store, now_ms


@pytest.fixture(scope="module")
def served(live_services: Settings) -> Iterator[Served]:
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"test-api-{uuid.uuid4().hex[:10]}", partitions=1)  # everything on partition 0
    publish_spec(spec, live_services.bootstrap)
    store, now_ms = aggregated_store(live_services, spec)
    health = {"kafka": lambda: metadata_answers(live_services.bootstrap, 5.0),
              "redis": lambda: redis_answers(live_services.redis)}
    app = create_app(store, PublishedPlans(PlanRegistry(live_services.bootstrap)), TopicEnds(live_services.bootstrap),
                     health, tokens=token_verifier(live_services))
    with api_tokens(live_services.redis) as tokens, serving(app) as url:
        token = tokens.issue([Scope.READ, Scope.METRICS]).token
        yield Served(url, spec, store, now_ms // 3_600_000 * 3_600_000, token)
    delete_topic(live_services.bootstrap, spec.topic)
    RedisStore(live_services.redis).delete_collection(spec.name)  # whatever a worker of another test added


def test_collections_lists_versions_mechanisms_windows_and_counts(served: Served) -> None:
    listed = {c["name"]: c for c in served.json("/collections")["collections"]}
    entry = listed[served.spec.name]
    assert entry["latest_version"] == 1
    assert entry["reports"] == {"accepted": 2 * CHUNK, "rejected": {"malformed": 1}}
    (version,) = entry["versions"]
    assert version["version"] == 1 and version["epsilon"] == served.spec.epsilon
    assert version["windows"] == ["1h", "all"]
    assert sorted(version["windows_with_data"]) == sorted([f"1h:{served.hour_start_ms}", "all"])
    assert version["reports"] == 2 * CHUNK
    assert {a["name"]: a["mechanism"] for a in version["attributes"]} == resolved_mechanisms(served.spec)
    by_name = {a["name"]: a for a in version["attributes"]}
    assert by_name["battery_level"]["range"] == [0, 100]
    assert by_name["display_mode"]["values"] == ["light", "dark", "auto"]


@pytest.mark.parametrize("query, window, postprocess", [
    ("", "all", "none"),
    ("?window=all&postprocess=norm_sub", "all", "norm_sub"),
    ("?window=1h&postprocess=clip", "1h", "clip"),
    ("?window=1h:{start}&version=1&postprocess=project", "1h:{start}", "project"),
])
def test_estimates_are_collection_estimates_as_json(served: Served, query: str, window: str,
                                                     postprocess: str) -> None:
    query, window = (s.format(start=served.hour_start_ms) for s in (query, window))
    got = served.json(f"/collections/{served.spec.name}/estimates{query}")
    expected = collection_estimates(served.store, Plan(served.spec), window, postprocess)  # type: ignore[arg-type]
    assert got == json.loads(json.dumps(expected))
    assert got["reports"] == 2 * CHUNK
    assert got["window"] == ("all" if window == "all" else f"1h:{served.hour_start_ms}")


def test_a_window_without_reports_answers_with_no_estimates(served: Served) -> None:
    got = served.json(f"/collections/{served.spec.name}/estimates?window=1h:3600000")
    assert got["reports"] == 0
    assert got["attributes"]["battery_level"]["mean"] is None


def test_a_collection_published_while_serving_is_found_within_a_second(served: Served,
                                                                       live_services: Settings) -> None:
    served.json("/collections")  # the published plans are read now
    spec = served.spec.replace(name=f"test-api-{uuid.uuid4().hex[:10]}")
    publish_spec(spec, live_services.bootstrap)
    try:
        time.sleep(1.0)
        got = served.json(f"/collections/{spec.name}/estimates")
    finally:
        delete_topic(live_services.bootstrap, spec.topic)
    assert (got["collection"], got["reports"]) == (spec.name, 0)


@pytest.mark.parametrize("path, message", [
    ("/collections/no-such-collection/estimates", "no published collection 'no-such-collection'"),
    ("/collections/{name}/estimates?version=7", "has no published version 7 (published: 1)"),
    ("/nowhere", "Not Found"),
])
def test_unknown_things_are_404_with_a_json_error(served: Served, path: str, message: str) -> None:
    assert message in served.json(path.format(name=served.spec.name), status=404)["error"]


@pytest.mark.parametrize("query, message", [
    ("window=2h", "window '2h' is not one of"),
    ("window=1h:abc", "the start of a 1h window is a multiple of 3600000 ms"),
    ("window=1h:1000", "the start of a 1h window is a multiple of 3600000 ms"),
    ("window=all:0", "the all-time window has no start"),
    ("postprocess=smooth", "postprocess must be one of none, clip, norm_sub, project"),
    ("version=one", "version must be a positive integer"),
])
def test_bad_parameters_are_400_with_a_clear_json_error(served: Served, query: str, message: str) -> None:
    assert message in served.json(f"/collections/{served.spec.name}/estimates?{query}", status=400)["error"]


def test_metrics_are_the_store_totals_lag_freshness_and_estimates(served: Served) -> None:
    status, content_type, body = served.get("/metrics")
    assert (status, content_type) == (200, "text/plain")
    name = served.spec.name
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.labels.get("collection") == name or s.name == "ldp_collections":
                samples[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "collection")))] = s.value
    assert samples[("ldp_reports_total", (("outcome", "accepted"), ("reason", "")))] == 2 * CHUNK
    assert samples[("ldp_reports_total", (("outcome", "rejected"), ("reason", "malformed")))] == 1
    lag = {dict(labels)["partition"]: v for (metric, labels), v in samples.items()
           if metric == "ldp_consumer_lag_messages"}
    assert lag == {str(p): (1 if p == 0 else 0) for p in range(served.spec.partitions)}
    freshness = samples[("ldp_freshness_seconds", ())]
    assert 0 <= freshness <= time.time() - served.hour_start_ms / 1000 + 1
    assert samples[("ldp_collections", ())] >= 1
    for window, label in (("all", "all"), ("1h", "1h")):
        expected = collection_estimates(served.store, Plan(served.spec), window)
        for attribute, entry in expected["attributes"].items():
            series = ({"": (entry["mean"], entry["stderr"])} if "mean" in entry else
                      {v: (f["estimate"], f["stderr"]) for v, f in entry["frequencies"].items()})
            for value, (x, s) in series.items():
                labels = (("attribute", attribute), ("value", value), ("window", label))
                assert samples[("ldp_estimate", labels)] == pytest.approx(x, rel=1e-12)
                assert samples[("ldp_estimate_stderr", labels)] == pytest.approx(s, rel=1e-12)


def test_healthz_says_what_answers(served: Served) -> None:
    assert served.json("/healthz") == {"ok": True, "kafka": True, "redis": True}


def test_healthz_is_503_when_a_service_does_not_answer(live_services: Settings) -> None:
    app = create_app(MemoryStore(), PublishedPlans(PlanRegistry(live_services.bootstrap)),
                     TopicEnds(live_services.bootstrap), {"redis": lambda: redis_answers("redis://127.0.0.1:1/0", 1.0)},
                     tokens=token_verifier(live_services))

    with serving(app) as url:
        status, content_type, body = http_get(url + "/healthz")
    assert (status, content_type, json.loads(body)) == (503, "application/json", {"ok": False, "redis": False})


def test_a_store_that_does_not_answer_is_503_with_a_json_error(live_services: Settings, served: Served) -> None:
    app = create_app(RedisStore("redis://127.0.0.1:1/0"), PublishedPlans(PlanRegistry(live_services.bootstrap)),
                     TopicEnds(live_services.bootstrap), {}, tokens=token_verifier(live_services))
    with serving(app) as url:
        answers = [http_get(url + path, served.token) for path in ("/collections", "/metrics",
                                                                   f"/collections/{served.spec.name}/estimates")]
    for status, content_type, body in answers:
        assert (status, content_type) == (503, "application/json")
        assert json.loads(body)["error"].startswith("the store or Kafka is unavailable: ")


class StubRegistry:
    """The published plans without Kafka: one collection, versions 1 and 2."""

    def __init__(self, spec: CollectionSpec) -> None:
        self._plans = [Plan(spec), Plan(spec.replace(version=2))]

    def plans(self, max_age_s: float = 0.0) -> list[Plan]:
        return self._plans

    def all(self) -> list[Plan]:
        return self._plans

    def read_since(self, arrived: float, every_s: float | None = None) -> None:
        """Nothing to read: the plans are all there."""


@dataclass(frozen=True)
class Offline:
    """The API over an empty MemoryStore and stubbed plans and Kafka (tokens in the real Redis)."""

    url: str
    token: str  # scope read

    def get(self, path: str) -> tuple[int, str, str]:
        return http_get(self.url + path, self.token)


@pytest.fixture(scope="module")
def offline(live_services: Settings) -> Iterator[Offline]:
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
    app = create_app(MemoryStore(), PublishedPlans(StubRegistry(spec)), lambda topics: {}, {},  # type: ignore[arg-type]
                     tokens=token_verifier(live_services))
    with api_tokens(live_services.redis) as tokens, serving(app) as url:
        yield Offline(url, tokens.issue([Scope.READ]).token)


ODD = st.one_of(
    st.text(max_size=30), st.sampled_from(["1", "2", "0", "-1", "+1", " 1", "1 ", "²", "١٢", "٣", "1e3", "0x10",
                                           "9" * 5000, "all", "1h", "1h:", "1h:0", "all:0", "1h:²", "1h:٣٦٠٠٠٠٠",
                                           "1h:" + "9" * 5000, "1h:-3600000", ":", "clip", "none", "\x00"]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["version", "window", "postprocess", "x"]), ODD), max_size=4),
       st.sampled_from(["diagnostics", "nowhere", "dïagnostics", "%ff", "a%2Fb"]), st.lists(st.sampled_from(
           ["%ff", "%c3%28", "%", "%zz", "&&", "=", ";", "+"]), max_size=3))
def test_no_query_string_makes_the_estimates_fail_with_a_500(offline: Offline, params: list[tuple[str, str]],
                                                             name: str, raw: list[str]) -> None:
    query = "&".join([urllib.parse.urlencode(params), *(f"version={r}" for r in raw)])
    path = urllib.parse.quote(f"/collections/{name}/estimates", safe="/%")
    status, content_type, body = offline.get(f"{path}?{query}")
    assert status in (200, 400, 404), body
    if content_type != "application/json":  # aiohttp's own answer to a request line over 8190 bytes
        assert status == 400 and body.startswith("Got more than 8190 bytes"), body
    else:
        assert status == 200 or "error" in json.loads(body)


@pytest.mark.parametrize("query", ["version=²", "version=" + "9" * 5000, "window=1h:²", "window=1h:" + "9" * 5000,
                                   "version=%ff"])
def test_odd_digits_are_a_400_not_a_500(offline: Offline, query: str) -> None:
    status, _, body = offline.get(f"/collections/diagnostics/estimates?{urllib.parse.quote(query, '=%:')}")
    assert status == 400, body
