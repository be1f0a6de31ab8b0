"""The edge's routes, by what they serve: `ReportRoutes` (the reports, step 1 of `ldpstream.edge.app`: size and
body; then `Edge.accept`), `JoinRoutes` (the join protocol, `ldpstream.edge.join`: enrolment, pointer, specs,
strategies, leaving) and `ProbeRoutes` (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`). A router answers
`match` with the handler of a request it serves (its 405 included), else None; the app asks its routers in turn
(`ldpstream.edge.app.ROUTERS`)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ldpstream.contract.clock import now_ms
from ldpstream.contract.signatures import block_header
from ldpstream.edge.answers import REDIS_DOWN, Handler, RequestIds, answered, json_answer, only, refused
from ldpstream.edge.config import EdgeConfig
from ldpstream.edge.forward import KAFKA, Forwarder
from ldpstream.edge.intake import JSON, SLOW_BODY, TOO_LARGE, Refusal
from ldpstream.edge.join import MAX_ENROL_BODY, Join
from ldpstream.edge.plans import EdgePlans
from ldpstream.edge.routing import Accepted
from ldpstream.edge.spool import Spool
from ldpstream.runtime.metrics import (
    EDGE_ENROLMENTS,
    EDGE_IN_FLIGHT,
    EDGE_REPORTS,
    EDGE_REQUESTS,
    EDGE_SECONDS,
    EDGE_SPOOL_BYTES,
    metrics_text,
)
from ldpstream.runtime.redis import ERRORS as REDIS_ERRORS
from ldpstream.runtime.tokens import Scope, TokenVerifier

log = logging.getLogger(__name__)
OPENAPI = Path(__file__).with_name("openapi.json")
VERSION_HEADER = "LDP-Spec-Version"  # the newest version of a collection, on the answers to its reports
IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}


class Edge(Protocol):
    """What the routes need of the edge process (`ldpstream.edge.app.Edge`)."""

    config: EdgeConfig
    plans: EdgePlans
    join: Join
    tokens: TokenVerifier
    spool: Spool
    forwarder: Forwarder

    async def accept(self, name: str, method: str, path: str, authorization: str | None,
                     content_encoding: str | None, content_type: str, body: bytes) -> Accepted:
        """Steps 2-5 of a report request (`ldpstream.edge.app`)."""
        ...

    def ready(self) -> web.Response: ...

    def refresh_if_stale(self) -> None: ...

    async def read_specs_since(self, arrived: float) -> None: ...


class Router(Protocol):
    """Routes of the edge: the handler of a request they serve, else None (`parts`: the path split at '/')."""

    def match(self, request: web.BaseRequest, parts: list[str]) -> Handler | None: ...


async def read_body(request: web.BaseRequest, timeout_s: float) -> bytes:
    """The request's body, within `timeout_s` unless it has all arrived already (the common case: no timer);
    Refusal 408 otherwise."""
    if request.content.is_eof():
        return await request.read()
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        raise Refusal(408, SLOW_BODY, f"the body did not arrive within {timeout_s:g} s") from None


class ReportRoutes:
    """`POST /v1/collections/{name}/reports`: answered with the verdicts, or refused with the reason; the newest
    spec version on every answer (devices refetch their spec when it moved on)."""

    def __init__(self, edge: Edge, ids: RequestIds) -> None:
        self.edge, self.ids = edge, ids

    def match(self, request: web.BaseRequest, parts: list[str]) -> Handler | None:
        if not (len(parts) == 5 and parts[:3] == ["", "v1", "collections"] and parts[3] and parts[4] == "reports"):
            return None
        if request.method != "POST":
            return lambda: _method_not_allowed("POST")
        return lambda: self.answer(request, parts[3])

    async def report(self, request: web.BaseRequest, name: str) -> web.Response:
        """Step 1 (size and body), then `Edge.accept`: 200 once in Kafka, 202 once in the spool."""
        limit = self.edge.config.max_body_bytes
        if request.content_length is None:
            raise Refusal(411, TOO_LARGE, "a Content-Length is required")
        if request.content_length > limit:
            raise Refusal(413, TOO_LARGE, f"body exceeds {limit} bytes")
        headers = request.headers
        accepted = await self.edge.accept(name, request.method, request.path, headers.get("Authorization"),
                                          headers.get("Content-Encoding"), headers.get("Content-Type", ""),
                                          await read_body(request, self.edge.config.body_timeout_s))
        answer = {"accepted": accepted.reports, "duplicates": accepted.duplicates, "stored": accepted.stored,
                  "verdicts": accepted.verdicts}
        return json_answer(answer, 200 if accepted.stored == KAFKA else 202)

    async def answer(self, request: web.BaseRequest, name: str) -> web.Response:
        """A report request's answer: the edge's, or its refusal with the reason; an unexpected error is logged
        and answered 500."""
        request_id = self.ids.next()
        started = time.perf_counter()
        try:
            response = await self.report(request, name)
            response.headers["X-Request-Id"] = request_id
            EDGE_REQUESTS.labels(str(response.status), "").inc()
        except Refusal as refusal:
            EDGE_REQUESTS.labels(str(refusal.status), refusal.reason).inc()
            if refusal.status < 500 and refusal.status not in (401, 429):
                EDGE_REPORTS.labels("rejected", refusal.reason).inc()
            response = refused(request_id, refusal)
            if refusal.status == 408:  # the rest of the body may still come: the connection cannot be reused
                response.force_close()
        except web.HTTPRequestEntityTooLarge:
            response = refused(request_id, Refusal(413, TOO_LARGE, "body too large"))
        except REDIS_ERRORS as exc:
            log.warning("Redis unavailable: %s", exc)
            response = refused(request_id, REDIS_DOWN)
        except Exception:
            log.exception("request %s failed", request_id)
            response = json_answer({"request_id": request_id, "error": "internal error"}, 500,
                                   {"X-Request-Id": request_id})
        newest = self.edge.plans.newest(name)
        if newest is not None:
            response.headers[VERSION_HEADER] = str(newest.spec.version)
        EDGE_SECONDS.observe(time.perf_counter() - started)
        return response


class JoinRoutes:
    """The join protocol (`ldpstream.edge.join`): `POST /v1/enroll`, `GET /v1/collections/{name}` (the pointer),
    `GET /v1/collections/{name}/specs/{version}`, `DELETE /v1/collections/{name}/devices/{device}`,
    `GET /v1/strategies/{hash}`; each answer with its request id, refusals counted like the reports'."""

    def __init__(self, edge: Edge, ids: RequestIds) -> None:
        self.edge, self.ids = edge, ids

    def match(self, request: web.BaseRequest, parts: list[str]) -> Handler | None:
        handler = self._handler(request, parts)
        return None if handler is None else lambda: answered(self.ids.next(), handler)

    def _handler(self, request: web.BaseRequest, parts: list[str]) -> Handler | None:
        method = request.method
        if parts == ["", "v1", "enroll"]:
            return only(method, "POST", lambda: self.enroll(request))
        if len(parts) == 4 and parts[2] == "collections" and parts[3]:
            return only(method, "GET", lambda: self.pointer(request, parts[3]))
        if len(parts) == 6 and parts[2] == "collections" and parts[4] == "specs" and parts[5].isdigit():
            return only(method, "GET", lambda: self.spec(parts[3], int(parts[5][:12])))
        if len(parts) == 6 and parts[2] == "collections" and parts[4] == "devices":
            return only(method, "DELETE", lambda: self.leave(request, parts[3], parts[5]))
        if len(parts) == 4 and parts[2] == "strategies":
            return only(method, "GET", lambda: self.strategy(parts[3]))
        return None

    async def enroll(self, request: web.BaseRequest) -> web.Response:
        if request.content_length is None or request.content_length > MAX_ENROL_BODY:
            raise Refusal(413, TOO_LARGE, f"an enrolment is at most {MAX_ENROL_BODY} bytes, with a Content-Length")
        try:
            body = await read_body(request, self.edge.config.body_timeout_s)
            credential = await self.edge.join.enroll(body, request.remote or "", now_ms())
        except Refusal as refusal:
            EDGE_ENROLMENTS.labels("refused", refusal.reason).inc()
            raise
        EDGE_ENROLMENTS.labels("enrolled", "").inc()
        return json_answer(credential.to_json(), 201)

    async def pointer(self, request: web.BaseRequest, name: str) -> web.Response:
        if self.edge.plans.newest(name) is None:  # a collection just published: found by a read begun after now
            await self.edge.read_specs_since(time.monotonic())
        self.edge.refresh_if_stale()
        signed = self.edge.join.pointer(name, now_ms())
        if signed is None:
            return json_answer({"error": f"no published collection {name!r}"}, 404)
        headers = {"ETag": signed.etag, "Cache-Control": "no-cache", "LDP-Signature": block_header(signed.block)}
        if request.headers.get("If-None-Match") == signed.etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=signed.body, content_type=JSON, headers=headers)

    async def spec(self, name: str, version: int) -> web.Response:
        plan = self.edge.join.spec(name, version)
        if plan is None:
            return json_answer({"error": f"no published spec {name}@{version}"}, 404)
        etag = f'"{hashlib.sha256(plan.signed).hexdigest()}"'
        return web.Response(body=plan.signed, content_type=JSON,
                            headers={**IMMUTABLE, "ETag": etag, "LDP-Signature": block_header(plan.block)})

    async def strategy(self, content_hash: str) -> web.Response:
        data = self.edge.join.strategy(content_hash)
        if data is None:
            return json_answer({"error": f"no strategy {content_hash[:16]} pinned by a published spec"}, 404)
        return web.Response(body=data, content_type="application/octet-stream", headers=IMMUTABLE)

    async def leave(self, request: web.BaseRequest, name: str, device: str) -> web.Response:
        await self.edge.join.leave(name, device, request.headers.get("Authorization"), request.path, now_ms())
        return web.Response(status=204)


class ProbeRoutes:
    """`GET /healthz` (alive), `/readyz` (`Edge.ready`), `/metrics` (scope metrics), `/openapi.json`."""

    def __init__(self, edge: Edge, ids: RequestIds) -> None:
        self.edge = edge

    def match(self, request: web.BaseRequest, parts: list[str]) -> Handler | None:
        if request.method not in ("GET", "HEAD"):
            return None
        if request.path == "/healthz":
            return lambda: _answer(json_answer({"alive": True}))
        if request.path == "/readyz":
            return lambda: _answer(self.edge.ready())
        if request.path == "/metrics":
            return lambda: self.metrics(request)
        if request.path == "/openapi.json":
            return lambda: _answer(web.Response(body=OPENAPI.read_bytes(), content_type=JSON))
        return None

    async def metrics(self, request: web.BaseRequest) -> web.Response:
        refusal = await self.edge.tokens.refusal(request.headers.getall("Authorization", []), Scope.METRICS)
        if refusal is not None:
            return json_answer({"error": refusal.error}, refusal.status, {"WWW-Authenticate": refusal.challenge})
        EDGE_SPOOL_BYTES.set(self.edge.spool.size)
        EDGE_IN_FLIGHT.set(self.edge.forwarder.in_flight)
        return web.Response(body=metrics_text(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _answer(response: web.Response) -> web.Response:
    return response


async def _method_not_allowed(allowed: str) -> web.Response:
    return json_answer({"error": "method not allowed"}, 405, {"Allow": allowed})

