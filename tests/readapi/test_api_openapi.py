"""The read API's OpenAPI document (`src/ldpstream/readapi/openapi.json`, served at /openapi.json) against the
server: every route is documented and every documented path is a route, and the real answers to requests on each
route, good and bad, have a documented status, content type and, for JSON, a body valid under the documented schema
(JSON Schema 2020-12, as OpenAPI 3.1 has it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.store import MemoryStore, RedisStore
from ldpstream.readapi.api import PublishedPlans, TopicEnds, create_app
from ldpstream.runtime.settings import Settings
from tests.readapi.series_support import SeriesApi, series_api
from tests.readapi.test_api import http_get, serving, token_verifier

DOCUMENT = json.loads((Path(__file__).parents[2] / "src/ldpstream/readapi/openapi.json").read_text())


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None  # the 302 itself is the answer checked


def answer(api: SeriesApi, path: str, token: str | None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET that does not follow redirects (`token` as in `SeriesApi.get`)."""
    bearer = api.token if token == "read" else token
    request = urllib.request.Request(api.url + path, headers={} if bearer is None else
                                     {"Authorization": f"Bearer {bearer}"})
    try:
        with urllib.request.build_opener(NoRedirects).open(request, timeout=30) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get_content_type(), exc.read().decode()


def schema_of(template: str, status: int, content_type: str) -> dict[str, Any] | None:
    """The documented schema of an answer (None: the status or content type is not documented for the route)."""
    responses = DOCUMENT["paths"][template]["get"]["responses"]
    if str(status) not in responses:
        return None
    content = responses[str(status)].get("content", {})
    if content_type not in content:
        return None
    return {**content[content_type]["schema"], "components": DOCUMENT["components"]}


def check_answer(template: str, status: int, content_type: str, body: str) -> None:
    """The answer is documented: its status and content type, and its body under the documented schema."""
    schema = schema_of(template, status, content_type)
    documented = DOCUMENT["paths"][template]["get"]["responses"]
    assert schema is not None or (str(status) in documented and not documented[str(status)].get("content")), \
        f"{template}: {status} {content_type} is not documented"
    if schema is not None and content_type == "application/json":
        errors = sorted(Draft202012Validator(schema).iter_errors(json.loads(body)), key=str)
        assert not errors, f"{template} {status}: {errors[0].message} at {list(errors[0].absolute_path)}"


@pytest.fixture(scope="module", params=["diagnostics.yaml", "app_usage.yaml", "crash_reports.yaml",
                                        "app_lifetime.yaml", "request_latency.yaml"])
def api(live_services: Settings, request: pytest.FixtureRequest) -> Iterator[SeriesApi]:
    with series_api(live_services, count=3, devices=200, example=request.param) as served:
        yield served


def test_the_document_is_openapi_3_1_with_valid_schemas() -> None:
    assert DOCUMENT["openapi"] == "3.1.0"
    for schema in DOCUMENT["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            assert method == "get" and operation["responses"] and operation["summary"], path


def test_every_route_is_documented_and_every_documented_path_is_a_route() -> None:
    app = create_app(MemoryStore(), PublishedPlans(PlanRegistry("127.0.0.1:1")), lambda topics: {}, {},
                     tokens=None)  # type: ignore[arg-type]  # the routes only: nothing is served
    routes = {r.resource.canonical for r in app.router.routes() if r.method == "GET" and r.resource is not None}
    assert routes == set(DOCUMENT["paths"])


def test_the_answers_are_the_documented_ones(api: SeriesApi) -> None:
    name, start = api.name, api.windows.starts[-1]
    attributes = [a.name for a in api.windows.spec.attributes]
    distribution = "/collections/{name}/distribution"
    requests = [
        ("/collections", "/collections", "read"),
        ("/collections", "/collections", None),
        ("/collections", "/collections", api.metrics_token),
        ("/collections/{name}/estimates", f"/collections/{name}/estimates", "read"),
        ("/collections/{name}/estimates", f"/collections/{name}/estimates?window=1m:{start}&postprocess=clip", "read"),
        ("/collections/{name}/estimates", f"/collections/{name}/estimates?postprocess=norm_sub", "read"),
        ("/collections/{name}/estimates", f"/collections/{name}/estimates?window=2h", "read"),
        ("/collections/{name}/estimates", "/collections/nowhere/estimates", "read"),
        ("/collections/{name}/estimates", f"/collections/{name}/estimates", "not-a-token"),
        *[("/collections/{name}/series", f"/collections/{name}/series?attribute={a}", "read") for a in attributes],
        ("/collections/{name}/series", f"/collections/{name}/series?attribute={attributes[0]}&window=1h", "read"),
        ("/collections/{name}/series", f"/collections/{name}/series?attribute={attributes[0]}&from=9&to=9", "read"),
        ("/collections/{name}/series", f"/collections/{name}/series?attribute=nothing", "read"),
        ("/collections/{name}/series", f"/collections/{name}/series?attribute={attributes[0]}", api.metrics_token),
        *[(distribution, f"/collections/{name}/distribution?attribute={a}", "read") for a in attributes],
        (distribution, f"/collections/{name}/distribution?attribute={attributes[0]}&window=1m:{start}"
                       "&quantiles=0.5,0.9,0.99", "read"),
        (distribution, f"/collections/{name}/distribution?attribute={attributes[0]}&window=1m:60000", "read"),
        (distribution, f"/collections/{name}/distribution?attribute={attributes[0]}&quantiles=1", "read"),
        (distribution, f"/collections/{name}/distribution", "read"),
        (distribution, "/collections/nowhere/distribution?attribute=x", "read"),
        (distribution, f"/collections/{name}/distribution?attribute={attributes[0]}", api.metrics_token),
        (distribution, f"/collections/{name}/distribution?attribute={attributes[0]}", None),
        ("/metrics", "/metrics", api.metrics_token),
        ("/metrics", "/metrics", "read"),
        ("/healthz", "/healthz", None),
        ("/openapi.json", "/openapi.json", None),
        ("/", "/", None),
        ("/console", "/console", None),
        ("/console/", "/console/", None),
        ("/console/collection", f"/console/collection?name={name}", None),
        ("/console/static/{file}", "/console/static/console.js", None),
        ("/console/static/{file}", "/console/static/uPlot.LICENSE", None),
        ("/console/static/{file}", "/console/static/..%2Fconsole.py", None),
    ]
    for template, path, token in requests:
        status, content_type, body = answer(api, path, token)
        check_answer(template, status, content_type, body)
    assert api.get("/openapi.json", None)[2] == json.dumps(DOCUMENT, indent=1, ensure_ascii=False) + "\n"


def test_a_store_that_does_not_answer_gets_the_documented_503(live_services: Settings, api: SeriesApi) -> None:
    app = create_app(RedisStore("redis://127.0.0.1:1/0"), PublishedPlans(PlanRegistry(live_services.bootstrap)),
                     TopicEnds(live_services.bootstrap), {}, tokens=token_verifier(live_services))
    with serving(app) as url:
        for template, path in (("/collections", "/collections"), ("/collections/{name}/series",
                                                                  f"/collections/{api.name}/series?attribute="
                                                                  f"{api.windows.spec.attributes[0].name}")):
            status, content_type, body = http_get(url + path, api.token)
            assert status == 503
            check_answer(template, status, content_type, body)
