"""The read side over HTTP (aiohttp): published collections, live estimates, Prometheus metrics, health.

Every route but `/healthz` needs `Authorization: Bearer <token>` (`ldpstream.runtime.tokens`; `ldp tokens create`) whose
scopes include the route's:
- `GET /collections` (scope `read`): every published collection with its versions, attributes (mechanisms
  resolved), windows, report counts and privacy guarantees (`ldpstream.contract.collector.privacy_budgets`: per report
  and, with a privacy block, over a device's lifetime);
- `GET /collections/{name}/estimates?window=all|1h|1h:<start_ms>&version=V&postprocess=none|clip|norm_sub|project`
  (scope `read`): `ldpstream.aggregator.estimates.collection_estimates` as JSON, the live estimates and, under
  "poisoning", the window's suspected poisoning with its defended estimates (404: unknown collection or version;
  400: bad parameter);
- `GET /collections/{name}/series?attribute=A&window=1h&from=T&to=T&version=V` (scope `read`): one attribute's
  windows that start in [from, to) (ms since the epoch or ISO 8601; default the 48 newest), each with its estimates,
  standard errors, 95% intervals, reports and privacy figures (`ldpstream.readapi.series`; 404: unknown collection,
  version or attribute; 400: a bad parameter, an empty range, one with no window or too many);
- `GET /collections/{name}/distribution?attribute=A&window=all|1h|1h:<start_ms>&version=V&quantiles=0.1,0.5,0.9`
  (scope `read`): `ldpstream.aggregator.estimates.attribute_distribution` as JSON, one numeric attribute's
  distribution (grid, density, CDF, quantiles at the levels asked, default DEFAULT_QUANTILES, with standard errors;
  null while no device has reported it) (404: unknown collection or version; 400: a missing or unknown attribute,
  one that is not numeric or whose mechanism gives a mean only, bad quantile levels, a bad window);
- `GET /jobs` (scope `read`): every published training job (`ldpstream.runtime.jobs.PublishedJobs`) with its
  published versions, its spec's figures (model, mechanism, epsilon per report, rounds, batch) and, once a coordinator
  runs it, its status (`ldpstream.sgd.jobstatus.job_status`), null before;
- `GET /jobs/{job}` (scope `read`): the job's status, the JSON `ldp train status JOB --json` prints (model version,
  held-out accuracy and loss and their curve per version, updates accepted and refused by reason, epsilon per
  report, most participations, lifetime epsilon, done) (404: a job not published, or one no coordinator ran yet);
- `GET /metrics` (scope `metrics`): the store-wide metrics of `ldpstream.readapi.metrics.StoreCollector` (Prometheus
text
  format);
- `GET /openapi.json` (open): this API's OpenAPI document (`src/ldpstream/readapi/openapi.json`);
- `GET /console/` (open: pages and scripts without data, which read the routes above with the token the person
  gives them; `ldpstream.readapi.console`), and `GET /` redirects there;
- `GET /healthz` (open, for liveness probes that carry no token): whether Kafka and Redis answer and, over the
  project's services, whether the pipeline is healthy (`ldpstream.aggregator.health`: workers alive, no crash loop, no
  collection stalled with messages waiting); 200, else 503 with the reasons in the body. Anyone who reaches it
  learns worker ids (host:pid), consumer groups, and every collection's name and backlog; no statistics.
Without a token, or with one that does not verify (malformed, unknown, wrong secret, expired, revoked), the answer
is 401 with `WWW-Authenticate: Bearer realm="ldpstream"` (and `error="invalid_token"` when a token was sent, RFC
6750); a valid token without the route's scope gets 403 (`error="insufficient_scope"`); a route not listed in
`ROUTE_SCOPES` needs `admin`. Checking a token only reads Redis (the API's Redis user may be read-only).
Errors are JSON objects `{"error": "..."}` (503 while Redis or Kafka fails). Store, Kafka and metrics calls
block, so they run in the default executor, never on the event loop. Query strings are outside input: no value of
a parameter makes a request fail with a 500 (numbers are ASCII digits, parsed only after a full match).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import hdrs, web
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis import RedisError

from ldpstream.aggregator.estimates import POSTPROCESS, attribute_distribution, collection_estimates
from ldpstream.aggregator.health import Health, HealthPolicy, pipeline_health
from ldpstream.aggregator.plans import Plan, PlanRegistry
from ldpstream.aggregator.store import ALL_TIME, RedisStore, StatsStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.collector import privacy_budgets
from ldpstream.contract.shuffled import shuffled_names
from ldpstream.contract.spec import (
    CategoricalAttribute,
    CollectionSpec,
    KeyValueAttribute,
    SpecError,
    StringAttribute,
    window_seconds,
)
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.distribution.base import DEFAULT_QUANTILES
from ldpstream.readapi.console import CONSOLE_ROUTES, add_console
from ldpstream.readapi.metrics import EndOffsets, StoreCollector, store_registry
from ldpstream.readapi.series import SeriesError, collection_series, series_query
from ldpstream.runtime.jobs import PublishedJobs
from ldpstream.runtime.kafka import TopicError, admin_client, metadata_answers
from ldpstream.runtime.redis import async_redis_client, redis_answers, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.tokens import Refused, Scope, TokenVerifier
from ldpstream.sgd.jobstatus import job_status

T = TypeVar("T")
KAFKA_TIMEOUT_S = 5.0
NUMBER = re.compile(r"[0-9]{1,18}")  # str.isdigit() takes '²' (which int() refuses) and digits beyond int64
LEVEL = re.compile(r"[0-9]{0,3}(\.[0-9]{1,15})?")  # a quantile level as decimal ASCII digits: 0.5, .99, 0.999
MAX_QUANTILES = 100  # quantile levels one distribution request may ask
OPEN_ROUTES = frozenset({"/healthz", "/openapi.json", *CONSOLE_ROUTES})
ROUTE_SCOPES = {"/collections": Scope.READ, "/collections/{name}/estimates": Scope.READ,
                "/collections/{name}/series": Scope.READ, "/collections/{name}/distribution": Scope.READ,
                "/jobs": Scope.READ, "/jobs/{job}": Scope.READ, "/metrics": Scope.METRICS}
OPENAPI = Path(__file__).with_name("openapi.json")


class PublishedPlans:
    """The published plans (the registry's cache, `ldpstream.runtime.specs.PublishedSpecs`), re-read at most every
    `max_age_s` (a read takes ~0.3 s); a collection asked for that is not known yet (it may have just been
    published) is looked for in a read begun after the request, reads at most every `miss_age_s`."""

    def __init__(self, registry: PlanRegistry, max_age_s: float = 5.0, miss_age_s: float = 1.0) -> None:
        self.registry = registry
        self.max_age_s = max_age_s
        self.miss_age_s = miss_age_s

    def all(self, max_age_s: float | None = None) -> list[Plan]:
        """Every published plan, by name then version, read at most `max_age_s` (default: the set one) ago."""
        return self.registry.plans(self.max_age_s if max_age_s is None else max_age_s)

    def versions(self, name: str) -> list[Plan]:
        """The published versions of a collection, oldest first (empty if it is not published)."""
        arrived = time.monotonic()
        known = [p for p in self.all() if p.spec.name == name]
        if not known:
            self.registry.read_since(arrived, self.miss_age_s)
            known = [p for p in self.registry.all() if p.spec.name == name]
        return known


class TopicEnds:
    """High watermarks of every partition of some topics, with one reused Kafka admin client."""

    def __init__(self, bootstrap: str, timeout_s: float = KAFKA_TIMEOUT_S) -> None:
        self.admin = admin_client(bootstrap)
        self.timeout_s = timeout_s

    def __call__(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """{(topic, partition): high watermark}; topics that do not exist are left out. KafkaException on failure."""
        if not topics:
            return {}
        existing = self.admin.list_topics(timeout=self.timeout_s).topics
        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t in topics
                  if t in existing and existing[t].error is None for p in existing[t].partitions}
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, request_timeout=self.timeout_s)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


@dataclass(frozen=True)
class Jobs:
    """What the job routes read: the published job specs and the (sync) Redis client of the coordinators' state."""

    published: PublishedJobs
    redis: Any


@dataclass(frozen=True)
class Api:
    """What the handlers read: the store, the published plans, the metrics registry, the health checks, the token
    verifier of the authentication middleware, and the training jobs (None: an API without any)."""

    store: StatsStore
    plans: PublishedPlans
    metrics: CollectorRegistry
    health: Mapping[str, Callable[[], bool]]
    tokens: TokenVerifier
    pipeline: Callable[[], Health] | None = None
    jobs: Jobs | None = None


API = web.AppKey("api", Api)


def create_app(store: StatsStore, plans: PublishedPlans, end_offsets: EndOffsets,
               health: Mapping[str, Callable[[], bool]],
               pipeline: Callable[[], Health] | None = None, *, tokens: TokenVerifier,
               jobs: Jobs | None = None) -> web.Application:
    """The web application over a store and the published plans; `health` says whether each service answers,
    `pipeline` assesses the workers and collections, `tokens` verifies bearer tokens (the app closes it on
    cleanup), `jobs` reads the training jobs."""
    app = web.Application(middlewares=[json_errors, bearer_tokens])
    app[API] = Api(store, plans, store_registry(StoreCollector(store, plans.all, end_offsets)), health, tokens,
                   pipeline, jobs)
    app.router.add_get("/collections", list_collections)
    app.router.add_get("/collections/{name}/estimates", estimates)
    app.router.add_get("/collections/{name}/series", series)
    app.router.add_get("/collections/{name}/distribution", distribution)
    app.router.add_get("/jobs", list_jobs)
    app.router.add_get("/jobs/{job}", job)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi)
    add_console(app.router)
    app.on_cleanup.append(close_tokens)
    return app


def app_for_services(cfg: Settings) -> web.Application:
    """The application over the project's Redis and Kafka."""
    store, plans, ends = RedisStore(cfg.redis), PublishedPlans(PlanRegistry(cfg.bootstrap)), TopicEnds(cfg.bootstrap)
    return create_app(store, plans, ends, {"kafka": lambda: metadata_answers(cfg.bootstrap, 2.0),
                                           "redis": lambda: redis_answers(cfg.redis, 2.0)},
                      lambda: pipeline_health(store, {p.spec.name: p.spec.topic for p in plans.all()}, ends,
                                              HealthPolicy.from_env(),
                                              shuffled=shuffled_names(p.spec for p in plans.all())),
                      tokens=TokenVerifier(async_redis_client(cfg.redis, 2.0)),
                      jobs=Jobs(PublishedJobs(cfg.bootstrap), redis_client(cfg.redis, 2.0)))


async def close_tokens(app: web.Application) -> None:
    """Close the token verifier's Redis client (on the app's cleanup)."""
    await app[API].tokens.close()


class ApiError(Exception):
    """A request the API refuses: its HTTP status and the message of the JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@web.middleware
async def json_errors(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Every error as a JSON object {"error": "..."}: aiohttp's own 404 and 405 too, and 503 if Redis or Kafka fails."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response({"error": str(exc)}, status=exc.status)
    except (RedisError, KafkaException, TopicError) as exc:
        return web.json_response({"error": f"the store or Kafka is unavailable: {exc}"}, status=503)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response({"error": exc.reason}, status=exc.status)


@web.middleware
async def bearer_tokens(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Let a request through if its route is open, or its bearer token verifies (else 401) and has the route's
    scope (else 403). A path no route matches needs a valid token only, so its 404 or 405 tells nothing to
    strangers."""
    unmatched = request.match_info.http_exception is not None
    route = None if unmatched else request.match_info.route.resource
    canonical = None if route is None else route.canonical
    if canonical in OPEN_ROUTES:
        return await handler(request)
    scope = None if canonical is None else ROUTE_SCOPES.get(canonical, Scope.ADMIN)
    refusal = await request.app[API].tokens.refusal(request.headers.getall(hdrs.AUTHORIZATION, []), scope)
    if refusal is not None:
        return refused(refusal)
    return await handler(request)


def refused(refusal: Refused) -> web.Response:
    """A 401 or 403 with its JSON error and WWW-Authenticate challenge."""
    return web.json_response({"error": refusal.error}, status=refusal.status,
                             headers={hdrs.WWW_AUTHENTICATE: refusal.challenge})


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking call in the default executor."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def list_collections(request: web.Request) -> web.Response:
    api = request.app[API]
    summary = await blocking(lambda: collections_summary(api.store, api.plans.all()))
    return web.json_response({"collections": summary})


async def estimates(request: web.Request) -> web.Response:
    api = request.app[API]
    name = request.match_info["name"]
    plan = requested_plan(await blocking(api.plans.versions, name), name, request.query.get("version"))
    window = request.query.get("window", ALL_TIME)
    postprocess = request.query.get("postprocess", "none")
    if postprocess not in POSTPROCESS:
        raise ApiError(400, f"postprocess must be one of {', '.join(POSTPROCESS)}, not {postprocess!r}")
    try:
        check_window(plan.spec, window)
        result = await blocking(collection_estimates, api.store, plan, window, postprocess)
    except (SpecError, ValueError) as exc:
        raise ApiError(400, str(exc)) from exc
    return web.json_response(result)


async def series(request: web.Request) -> web.Response:
    api = request.app[API]
    name = request.match_info["name"]
    plan = requested_plan(await blocking(api.plans.versions, name), name, request.query.get("version"))
    q = request.query
    try:
        query = series_query(plan, q.get("attribute"), q.get("window"), q.get("from"), q.get("to"), now_ms())
    except SeriesError as exc:
        raise ApiError(exc.status, str(exc)) from exc
    return web.json_response(await blocking(collection_series, api.store, plan, query))


async def distribution(request: web.Request) -> web.Response:
    api = request.app[API]
    name = request.match_info["name"]
    plan = requested_plan(await blocking(api.plans.versions, name), name, request.query.get("version"))
    attribute = request.query.get("attribute")
    if not attribute:
        raise ApiError(400, "attribute is required: the name of one of the collection's numeric attributes")
    window = request.query.get("window", ALL_TIME)
    levels = quantile_levels(request.query.get("quantiles"))
    try:
        check_window(plan.spec, window)
        plan.spec.attribute_index(attribute)
        result = await blocking(attribute_distribution, api.store, plan, attribute, window, levels)
    except (SpecError, LDPError, ValueError) as exc:
        raise ApiError(400, str(exc)) from exc
    return web.json_response(result)


async def list_jobs(request: web.Request) -> web.Response:
    return web.json_response({"jobs": await blocking(jobs_summary, request.app[API].jobs)})


async def job(request: web.Request) -> web.Response:
    jobs = request.app[API].jobs
    name = request.match_info["job"]
    published = None if jobs is None else await blocking(jobs.published.newest, name)
    if jobs is None or published is None:
        raise ApiError(404, f"no published training job {name[:80]!r}")
    found = await blocking(job_status, jobs.redis, jobs.published.all, name)
    if found is None:
        raise ApiError(404, f"training job {name!r} is published (version {published.spec.version}) but no "
                            f"coordinator has run it yet: `ldp train run {name}`")
    return web.json_response(found)


def jobs_summary(jobs: Jobs | None) -> list[dict[str, Any]]:
    """Per published job, by id: its newest spec's figures, its published versions and its status (null while no
    coordinator has run it) (blocking: reads Kafka and Redis)."""
    if jobs is None:
        return []
    published = jobs.published.all()
    by_id: dict[str, list[int]] = {}
    for signed in published.values():
        by_id.setdefault(signed.spec.job_id, []).append(signed.spec.version)
    out = []
    for job_id, versions in sorted(by_id.items()):
        spec = published[f"job/{job_id}@{max(versions)}"].spec
        out.append({"job": job_id, "job_version": spec.version, "versions": sorted(versions),
                    "model": {"architecture": spec.model.architecture, "dims": spec.model.dims},
                    "parameters": spec.parameters, "mechanism": spec.mechanism.name,
                    "epsilon_per_report": spec.epsilon, "max_rounds": spec.max_rounds,
                    "lifetime_epsilon_bound": spec.epsilon * spec.max_rounds, "batch_size": spec.batch_size,
                    "max_versions": spec.max_versions, "status": job_status(jobs.redis, lambda: published, job_id)})
    return out


def quantile_levels(text: str | None) -> tuple[float, ...]:
    """The `quantiles` parameter, comma-separated levels strictly inside (0, 1) (default DEFAULT_QUANTILES); 400
    for anything else, or more than MAX_QUANTILES levels."""
    if text is None:
        return DEFAULT_QUANTILES
    parts = text.split(",", MAX_QUANTILES)
    if len(parts) > MAX_QUANTILES:
        raise ApiError(400, f"quantiles: at most {MAX_QUANTILES} levels")
    levels = []
    for part in parts:
        part = part.strip(" ")
        if not part or LEVEL.fullmatch(part) is None or not 0 < float(part) < 1:
            raise ApiError(400, "quantiles are comma-separated levels strictly between 0 and 1 (e.g. 0.5,0.9,0.99), "
                                f"not {part[:40]!r}")
        levels.append(float(part))
    return tuple(levels)


async def openapi(request: web.Request) -> web.Response:
    return web.Response(body=OPENAPI.read_bytes(), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    body = await blocking(generate_latest, request.app[API].metrics)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    api = request.app[API]
    answers = await asyncio.gather(*(blocking(check) for check in api.health.values()))
    body: dict[str, Any] = {"ok": all(answers), **dict(zip(api.health, answers, strict=True))}
    if api.pipeline is not None and all(answers):
        pipeline = await blocking(api.pipeline)
        body |= {"ok": pipeline.ok, "pipeline": pipeline.as_dict()}
    return web.json_response(body, status=200 if body["ok"] else 503)


def requested_plan(versions: list[Plan], name: str, version: str | None) -> Plan:
    """The plan of the requested version (default: the newest); 404 if it is not published, 400 if not a number."""
    if not versions:
        raise ApiError(404, f"no published collection {name!r}")
    if version is None:
        return versions[-1]
    if NUMBER.fullmatch(version) is None:
        raise ApiError(400, f"version must be a positive integer, not {version[:40]!r}")
    found = [p for p in versions if p.spec.version == int(version)]
    if not found:
        published = ", ".join(str(p.spec.version) for p in versions)
        raise ApiError(404, f"collection {name!r} has no published version {version} (published: {published})")
    return found[0]


def check_window(spec: CollectionSpec, window: str) -> None:
    """ValueError unless `window` is 'all', one of the spec's windows, or such a window and the start of one."""
    name, colon, start = window.partition(":")
    names = [*spec.windows, ALL_TIME]
    if name not in names:
        raise ValueError(f"window {name!r} is not one of {spec.key}'s windows: {', '.join(names)}")
    if not colon:
        return
    if name == ALL_TIME:
        raise ValueError("the all-time window has no start: use window=all")
    length_ms = window_seconds(name) * 1000
    if NUMBER.fullmatch(start) is None or int(start) % length_ms:
        raise ValueError(f"{window[:60]!r}: the start of a {name} window is a multiple of {length_ms} ms since the "
                         "epoch")


def collections_summary(store: StatsStore, plans: list[Plan]) -> list[dict[str, Any]]:
    """Per published collection: its report counts and its versions (blocking: reads the store)."""
    by_name: dict[str, list[Plan]] = {}
    for plan in plans:
        by_name.setdefault(plan.spec.name, []).append(plan)
    out = []
    for name, versions in sorted(by_name.items()):
        outcomes = store.outcomes(name)
        windows = store.windows(name)
        out.append({"name": name, "latest_version": versions[-1].spec.version,
                    "reports": {"accepted": outcomes.get("accepted", 0),
                                "rejected": {k.partition(":")[2]: n for k, n in sorted(outcomes.items())
                                             if k.startswith("rejected:")}},
                    "versions": [version_summary(store, p, windows) for p in versions]})
    return out


def version_summary(store: StatsStore, plan: Plan, windows: list[tuple[int, str, int]]) -> dict[str, Any]:
    """A published version: budget, sampling, windows (those with data too), attributes and their mechanisms."""
    spec = plan.spec
    attributes = []
    for attr, mechanism in zip(spec.attributes, plan.mechanisms, strict=True):
        domain = ({"values": attr.values} if isinstance(attr, CategoricalAttribute) else
                  {"max_length": attr.max_length, "alphabet": attr.alphabet, "top": attr.top}
                  if isinstance(attr, StringAttribute) else
                  {"keys": attr.labels, "padding": attr.padding, "range": list(attr.range)}
                  if isinstance(attr, KeyValueAttribute) else {"range": list(attr.range)})
        attributes.append({"name": attr.name, "type": attr.type, "description": attr.description, "unit": attr.unit,
                           "mechanism": mechanism.name, **domain})
    return {"version": spec.version, "description": spec.description, "epsilon": spec.epsilon,
            "privacy": privacy_budgets(spec, plan.strategies),
            "shuffle": None if spec.shuffle is None else spec.shuffle.to_dict(),
            "sampling": spec.sampling, "attributes_per_report": plan.attributes_per_device,
            "one_report_per_window": spec.one_report_per_window, "topic": spec.topic,
            "windows": [*spec.windows, ALL_TIME],
            "windows_with_data": [w if w == ALL_TIME else f"{w}:{s}" for v, w, s in windows if v == spec.version],
            "reports": int(store.read_window(spec.name, spec.version, ALL_TIME, 0, {}).devices),
            "attributes": attributes}


def serve(cfg: Settings, host: str = "127.0.0.1", port: int = 8000,
          on_start: Callable[[str], None] | None = None) -> None:
    """Serve the API in the foreground until SIGINT or SIGTERM (aiohttp stops cleanly on both)."""
    web.run_app(app_for_services(cfg), host=host, port=port, print=on_start, handle_signals=True)

