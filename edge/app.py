"""The edge's HTTP service (aiohttp): `POST /v1/collections/{name}/reports`, `/healthz`, `/readyz`, `/metrics`,
`/openapi.json` (the protocol, `edge/openapi.json`).

A report request, in order (each refusal answers with its status and reason, counts it, and changes nothing):
1. size: a Content-Length is required (411) and bounded (413), and the body is read up to it;
2. authentication (`collection.auth`): the Authorization header names a device whose key signed this method,
   path, time and body (401; the key is derived, so no lookup);
3. parsing and checks (`edge.intake`, the aggregator's schema code): 400/404/413/415; the requests that reach
   this step in one event-loop turn are checked together, one vectorised pass (`edge.coalesce`);
4. admission (`edge.devices.Admission`, one Redis script per request, the turn's requests in one pipelined round
   trip): not enrolled or revoked, replay (401), rate (429), and
   reports whose window the device already used (dropped; all of them: 409);
5. forwarding (`edge.forward`): answered 200 once Kafka acknowledged, 202 once fsynced in the spool, or 503/507
   (the window marks released, so the device can send again).
Every answer carries `X-Request-Id`; refusals that a retry can cure carry Retry-After.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import redis
import uvloop
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from collection.auth import AuthError, parse_authorization, verify
from collection.pseudonym import device_partitions, device_pseudonym
from collection.topics import report_topic
from collection.validation import dedupe_window
from edge.coalesce import Coalesce
from edge.devices import RATE_LIMITED, REPLAYED, Admission, Admit
from edge.forward import KAFKA, Forwarder
from edge.intake import (
    DUPLICATE,
    JSON,
    TOO_LARGE,
    UNAUTHORIZED,
    Checked,
    Item,
    Refusal,
    check_many,
    inflate,
    json_version,
    media_type,
    parse,
    without_rows,
)
from edge.intake import (
    RATE_LIMITED as RATE_REASON,
)
from edge.intake import (
    REPLAYED as REPLAY_REASON,
)
from edge.plans import EdgePlan, EdgePlans
from edge.spool import Spool
from runtime.clock import now_ms
from runtime.metrics import EDGE_IN_FLIGHT, EDGE_REPORTS, EDGE_REQUESTS, EDGE_SECONDS, EDGE_SPOOL_BYTES
from runtime.redis import async_redis_client

log = logging.getLogger(__name__)
OPENAPI = Path(__file__).with_name("openapi.json")
RETRY_AFTER_S = {429: 1, 503: 2, 507: 10}


@dataclass(frozen=True)
class EdgeConfig:
    """The edge's limits and places (`ldp edge --help` describes each)."""

    bootstrap: str
    redis_url: str
    master: bytes
    spool_dir: Path
    spool_bytes: int = 256 * 2**20
    max_body_bytes: int = 1 * 2**20
    max_inflated_bytes: int = 4 * 2**20
    max_reports: int = 100
    rate_per_s: int = 20
    linger_s: float = 0.005
    max_in_flight: int = 200_000
    delivery_timeout_ms: int = 10_000


class Edge:
    """One edge process's state: published plans, Redis admission, the forwarder and its spool."""

    def __init__(self, config: EdgeConfig) -> None:
        self.config = config
        self.plans = EdgePlans(config.bootstrap)
        self.redis = async_redis_client(config.redis_url, timeout_s=5.0)
        self.admission = Admission(self.redis, config.master, config.rate_per_s)
        self.spool = Spool(config.spool_dir, config.spool_bytes)
        self.check: Coalesce[Item, Checked] = Coalesce(self._check_many)
        self.admit: Coalesce[Admit, list[int] | int] = Coalesce(self.admission.admit)
        self.forwarder = Forwarder(config.bootstrap, self.spool, linger_s=config.linger_s,
                                   max_in_flight=config.max_in_flight,
                                   delivery_timeout_ms=config.delivery_timeout_ms)

    @staticmethod
    async def _check_many(items: Sequence[Item]) -> list[Checked | Refusal]:
        return check_many(items, now_ms())

    async def plan(self, name: str, version: int) -> EdgePlan | None:
        """The published plan (a Kafka read, off the loop, only on a miss)."""
        return self.plans.cached(name, version) or await asyncio.get_running_loop().run_in_executor(
            None, self.plans.get, name, version)

    async def report(self, request: web.Request) -> web.Response:
        """Steps 1-5 of the module docstring for one request."""
        name = request.match_info["name"]
        if request.content_length is None:
            raise Refusal(411, TOO_LARGE, "a Content-Length is required")
        if request.content_length > self.config.max_body_bytes:
            raise Refusal(413, TOO_LARGE, f"body exceeds {self.config.max_body_bytes} bytes")
        body = await request.read()
        try:
            signed = parse_authorization(request.headers.get("Authorization"))
            verify(self.admission.key_of(name, signed.device), signed, request.method, request.path, body, now_ms())
        except AuthError as exc:
            raise Refusal(401, UNAUTHORIZED, str(exc)) from None
        data = inflate(body, request.headers.get("Content-Encoding"), self.config.max_inflated_bytes)
        content_type = request.headers.get("Content-Type", "")
        version = json_version(data) if media_type(content_type) == JSON else None
        json_plan = None if version is None else await self.plan(name, version)
        env = parse(data, content_type, name, json_plan, self.config.max_reports)
        pseudonym = device_pseudonym(name, signed.device)
        checked = await self.check((env, await self.plan(name, env.spec_version), pseudonym))
        return await self._admit_and_forward(name, signed.device, signed.signature, pseudonym, checked)

    async def _admit_and_forward(self, name: str, device: str, signature: str, pseudonym: int,
                                 checked: Checked) -> web.Response:
        spec = checked.plan.spec
        marks = Admission.window_keys(name, spec.version, device, checked.window_starts)
        if not spec.one_report_per_window:
            marks = []
        answer = await self.admit(Admit(name, device, signature, dedupe_window(spec), marks))
        if answer == REPLAYED:
            raise Refusal(401, REPLAY_REASON, "this signature was used before (replayed request)")
        if answer == RATE_LIMITED:
            raise Refusal(429, RATE_REASON, f"more than {self.config.rate_per_s} requests per second")
        if isinstance(answer, int):
            raise Refusal(401, UNAUTHORIZED, "unknown or revoked device")
        used = np.zeros(len(checked), dtype=bool)
        used[answer] = True
        if used.all():
            raise Refusal(409, DUPLICATE, "the device already reported in the window of every report")
        if used.any():
            checked = without_rows(checked, used)
            marks = [m for m, u in zip(marks, used.tolist(), strict=True) if not u]
        partition = int(device_partitions(np.array([pseudonym], dtype=np.uint64), spec.partitions)[0])
        try:
            stored = await self.forwarder.send(report_topic(name), partition, checked.envelope, len(checked))
        except BaseException:
            await self.admission.release(marks)
            raise
        EDGE_REPORTS.labels("accepted", "").inc(len(checked))
        if used.any():
            EDGE_REPORTS.labels("rejected", DUPLICATE).inc(int(used.sum()))
        return web.json_response({"accepted": len(checked), "duplicates": np.flatnonzero(used).tolist(),
                                  "stored": stored}, status=200 if stored == KAFKA else 202)

    async def ready(self, _request: web.Request) -> web.Response:
        """Ready: the published specs are loaded, Kafka answers and the spool has room."""
        reasons = [r for r, bad in (("loading the published specs", not self.plans.loaded),
                                    ("Kafka unreachable", not self.forwarder.kafka_up),
                                    ("spool full", self.spool.full)) if bad]
        return web.json_response({"ready": not reasons, "reasons": reasons, "spool_bytes": self.spool.size},
                                 status=503 if reasons else 200)


def _refused(request_id: str, refusal: Refusal) -> web.Response:
    headers = {"X-Request-Id": request_id}
    if refusal.status in RETRY_AFTER_S:
        headers["Retry-After"] = str(RETRY_AFTER_S[refusal.status])
    return web.json_response({"request_id": request_id, "reason": refusal.reason, "error": refusal.detail},
                             status=refusal.status, headers=headers)


def make_app(config: EdgeConfig) -> web.Application:
    """The edge's aiohttp application (the forwarder starts and stops with it)."""
    edge = Edge(config)

    @web.middleware
    async def answer(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                     ) -> web.StreamResponse:
        """Request id, refusals as JSON, metrics; an unexpected error is logged and answered 500."""
        if not request.path.startswith("/v1/"):
            return await handler(request)
        request_id = uuid.uuid4().hex[:16]
        started = time.perf_counter()
        try:
            response = await handler(request)
            response.headers["X-Request-Id"] = request_id
            EDGE_REQUESTS.labels(str(response.status), "").inc()
        except Refusal as refusal:
            EDGE_REQUESTS.labels(str(refusal.status), refusal.reason).inc()
            if refusal.status < 500 and refusal.status not in (401, 429):
                EDGE_REPORTS.labels("rejected", refusal.reason).inc()
            response = _refused(request_id, refusal)
        except web.HTTPRequestEntityTooLarge:
            response = _refused(request_id, Refusal(413, TOO_LARGE, "body too large"))
        except redis.RedisError as exc:
            log.warning("Redis unavailable: %s", exc)
            response = _refused(request_id, Refusal(503, "redis_unavailable", "device state unavailable"))
        except web.HTTPException:
            raise
        except Exception:
            log.exception("request %s failed", request_id)
            response = web.json_response({"request_id": request_id, "error": "internal error"}, status=500,
                                         headers={"X-Request-Id": request_id})
        EDGE_SECONDS.observe(time.perf_counter() - started)
        return response

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"alive": True})

    async def metrics(_request: web.Request) -> web.Response:
        EDGE_SPOOL_BYTES.set(edge.spool.size)
        EDGE_IN_FLIGHT.set(edge.forwarder.in_flight)
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(_request: web.Request) -> web.Response:
        return web.Response(body=OPENAPI.read_bytes(), content_type="application/json")

    async def on_startup(_app: web.Application) -> None:
        await edge.forwarder.start()
        # the specs before the first requests (/readyz waits for them): misses under load each wait for a read
        asyncio.get_running_loop().run_in_executor(None, edge.plans.refresh)

    async def on_cleanup(_app: web.Application) -> None:
        await edge.forwarder.stop()
        await edge.redis.aclose()

    app = web.Application(middlewares=[answer], client_max_size=config.max_body_bytes)
    app.router.add_post("/v1/collections/{name}/reports", edge.report)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", edge.ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def serve(config: EdgeConfig, host: str, port: int, reuse_port: bool = False, loop: str = "uvloop") -> None:
    """Run one edge process until SIGINT/SIGTERM (`reuse_port`: several processes share the port; `loop`:
    "uvloop" or "asyncio", the event loop)."""
    event_loop = uvloop.new_event_loop() if loop == "uvloop" else asyncio.new_event_loop()
    web.run_app(make_app(config), host=host, port=port, reuse_port=reuse_port, access_log=None, loop=event_loop,
                handle_signals=True, print=None, auto_decompress=False)  # the signature covers the sent bytes;
    # `edge.intake.inflate` decompresses them, bounded
