"""The edge's HTTP service (aiohttp): `POST /v1/collections/{name}/reports`, `/healthz`, `/readyz`, `/metrics`,
`/openapi.json` (the protocol, `src/ldpstream/edge/openapi.json`).

A report request, in order (each refusal answers with its status and reason, counts it, and changes nothing):
1. size: a Content-Length is required (411) and bounded (413), and the body is read up to it within the body
   timeout (408, and the connection closed; after any refusal the rest of a body is read and dropped for at most
   that long too, so the client can read its answer);
2. authentication (`ldpstream.contract.auth`): the Authorization header names a device whose key signed this method,
   path, time and body (401; the key is derived, so no lookup);
3. parsing (`ldpstream.edge.intake`): 400/413/415; then the requests that got this far in one event-loop turn go on
   together (`ldpstream.edge.coalesce`), each still answered alone: their checks against the published spec (404, 400;
   the aggregator's schema code) in one vectorised pass, a report that fails a per-report check refused alone with
   its verdict (every report of the request failing: 400);
4. admission (`ldpstream.edge.devices.Admission`, one Redis script over the turn's requests): not enrolled or revoked,
   replay (401), rate (429), and reports whose window the device already used (dropped; all of them: 409);
5. forwarding (`ldpstream.edge.forward`), the turn's reports for one partition as one submission: answered, with the
   verdict on each report of the request (`docs/reference/protocol.md`, "Delivery"), 200 once Kafka acknowledged,
   202 once fsynced in the spool, or 503/507 (the window marks released, so the device can send again).
Every answer carries `X-Request-Id`; refusals that a retry can cure carry Retry-After.

Slow or idle clients cannot hold the process's connections: a connection that has not completed a request within
the idle timeout of its start or of its last answer is closed (half-sent headers included), and beyond
`max_connections` open connections a new one is answered 503 and closed, so a flood of idle sockets cannot take the
descriptors Kafka, Redis and the spool need.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import resource
import secrets
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import uvloop
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import mark_process_dead

from ldpstream.contract.auth import AuthError, parse_authorization, verify
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_partitions, device_pseudonym
from ldpstream.contract.signatures import block_header
from ldpstream.contract.topics import report_topic
from ldpstream.contract.validation import dedupe_window, mark_ttl_ms
from ldpstream.contract.wire import Envelope
from ldpstream.edge.coalesce import Coalesce
from ldpstream.edge.devices import RATE_LIMITED, REPLAYED, Admission, Admit
from ldpstream.edge.forward import KAFKA, Forwarder
from ldpstream.edge.intake import (
    ADMITTED,
    DUPLICATE,
    JSON,
    SLOW_BODY,
    TOO_LARGE,
    TOO_MANY_CONNECTIONS,
    UNAUTHORIZED,
    Checked,
    Refusal,
    anonymous,
    check_many,
    inflate,
    json_version,
    media_type,
    parse,
    without_rows,
)
from ldpstream.edge.intake import (
    RATE_LIMITED as RATE_REASON,
)
from ldpstream.edge.intake import (
    REPLAYED as REPLAY_REASON,
)
from ldpstream.edge.join import MAX_ENROL_BODY, EnrolLimits, Join
from ldpstream.edge.keyring import Keyring
from ldpstream.edge.plans import EdgePlan, EdgePlans
from ldpstream.edge.spool import Spool
from ldpstream.edge.training import TrainingEdge
from ldpstream.runtime.join_keys import load_enrolment_keys
from ldpstream.runtime.metrics import (
    EDGE_ENROLMENTS,
    EDGE_IN_FLIGHT,
    EDGE_REPORTS,
    EDGE_REQUESTS,
    EDGE_SECONDS,
    EDGE_SPOOL_BYTES,
    MULTIPROCESS_DIR,
    metrics_text,
)
from ldpstream.runtime.redis import ERRORS as REDIS_ERRORS
from ldpstream.runtime.redis import async_redis_client
from ldpstream.runtime.signing import SigningError, load_signing_key
from ldpstream.runtime.supervisor import exit_within
from ldpstream.runtime.tokens import Scope, TokenVerifier

log = logging.getLogger(__name__)
OPENAPI = Path(__file__).with_name("openapi.json")
RETRY_AFTER_S = {429: 1, 503: 2, 507: 10}
VERSION_HEADER = "LDP-Spec-Version"  # the newest version of a collection, on the answers to its reports
IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}
# CORS for the browser pages of the configured origins (none by default): what they may send and read
CORS_PREFLIGHT = {"Access-Control-Allow-Methods": "GET, POST, DELETE",
                  "Access-Control-Allow-Headers": "Authorization, Content-Type, Content-Encoding, If-None-Match",
                  "Access-Control-Max-Age": "600"}
CORS_EXPOSED = "LDP-Signature, LDP-Spec-Version, LDP-Job-Version, ETag, Retry-After, X-Request-Id"
# from SIGTERM to exit at most: the forwarder's flush of what is in flight (bounded at 15 s: delivered or spooled),
# then the rest; with nothing in flight a stop takes well under a second, Kafka and Redis gone or not
STOP_S = 20.0
RESERVED_DESCRIPTORS = 256  # kept from the connection cap: Kafka, Redis, the spool's files, logs
T = TypeVar("T")


@dataclass(frozen=True)
class EdgeConfig:
    """The edge's limits and places (`ldp edge --help` describes each)."""

    bootstrap: str
    redis_url: str
    keyring: Path
    spool_dir: Path
    spool_bytes: int = 256 * 2**20
    max_body_bytes: int = 1 * 2**20
    max_inflated_bytes: int = 4 * 2**20
    max_reports: int = 100
    rate_per_s: int = 20
    linger_s: float = 0.005
    max_in_flight: int = 200_000
    delivery_timeout_ms: int = 10_000
    idle_timeout_s: float = 60.0
    body_timeout_s: float = 30.0
    max_connections: int = 10_000
    pointer_key: Path | None = None  # the online key that signs pointers (`ldpstream.runtime.join_keys`)
    enrolment_keys: Path | None = None  # the public keys enrolment tokens are signed with
    enrol_limits: EnrolLimits = EnrolLimits()
    cors_origins: frozenset[str] = frozenset()  # origins whose browser pages may call the edge (exact match)


@dataclass(frozen=True)
class Incoming:
    """A request that authenticated and parsed: who sent it (the signature, for replay), for which collection,
    and its envelope with the plan of its spec version (None: not published)."""

    collection: str
    device: str
    signature: str
    pseudonym: int
    envelope: Envelope
    plan: EdgePlan | None


@dataclass(frozen=True)
class Accepted:
    """A request's reports are safe: how many, the positions dropped as already reported in their window, where
    they are (`KAFKA` or `SPOOL`), and the verdict on each report of the request (`ADMITTED` or why not)."""

    reports: int
    duplicates: list[int]
    stored: str
    verdicts: list[str]


class Edge:
    """One edge process's state: published plans, Redis admission, the forwarder and its spool."""

    def __init__(self, config: EdgeConfig) -> None:
        self.config = config
        self.plans = EdgePlans(config.bootstrap)
        self.redis = async_redis_client(config.redis_url, timeout_s=5.0)
        self.admission = Admission(self.redis, Keyring(config.keyring), config.rate_per_s)
        self.tokens = TokenVerifier(self.redis)  # of /metrics scrapes (the API's tokens, scope metrics)
        self.spool = Spool(config.spool_dir, config.spool_bytes)
        self.intake: Coalesce[Incoming, Accepted] = Coalesce(self._intake_many)
        self.forwarder = Forwarder(config.bootstrap, self.spool, linger_s=config.linger_s,
                                   max_in_flight=config.max_in_flight,
                                   delivery_timeout_ms=config.delivery_timeout_ms)
        self._refreshing = False
        self.join = Join(self.plans, self.redis, self.admission.keyring, _key(config.pointer_key, load_signing_key),
                         _key(config.enrolment_keys, load_enrolment_keys), config.enrol_limits)
        self.training = TrainingEdge(config.bootstrap, self.redis, self.admission)  # /v1/jobs/...

    async def plan(self, name: str, version: int) -> EdgePlan | None:
        """The published plan (a Kafka read, off the loop, only on a miss)."""
        return self.plans.cached(name, version) or await asyncio.get_running_loop().run_in_executor(
            None, self.plans.get, name, version)

    async def report(self, request: web.BaseRequest, name: str) -> web.Response:
        """Steps 1-5 of the module docstring for one request to collection `name` (`accept` after step 1)."""
        if request.content_length is None:
            raise Refusal(411, TOO_LARGE, "a Content-Length is required")
        if request.content_length > self.config.max_body_bytes:
            raise Refusal(413, TOO_LARGE, f"body exceeds {self.config.max_body_bytes} bytes")
        headers = request.headers
        accepted = await self.accept(name, request.method, request.path, headers.get("Authorization"),
                                     headers.get("Content-Encoding"), headers.get("Content-Type", ""),
                                     await self._body(request))
        answer = {"accepted": accepted.reports, "duplicates": accepted.duplicates, "stored": accepted.stored,
                  "verdicts": accepted.verdicts}
        return _json(answer, 200 if accepted.stored == KAFKA else 202)

    async def accept(self, name: str, method: str, path: str, authorization: str | None,
                     content_encoding: str | None, content_type: str, body: bytes) -> Accepted:
        """Steps 2-5 for a request's headers and body, apart from the HTTP server; a Refusal otherwise (steps 3-5
        for the requests of a loop turn together: `_intake_many`)."""
        try:
            signed = parse_authorization(authorization)
            verify(self.admission.key_of(name, signed.device), signed, method, path, body, now_ms())
        except AuthError as exc:
            raise Refusal(401, UNAUTHORIZED, str(exc)) from None
        data = inflate(body, content_encoding, self.config.max_inflated_bytes)
        version = json_version(data) if media_type(content_type) == JSON else None
        json_plan = None if version is None else await self.plan(name, version)
        env = parse(data, content_type, name, json_plan, self.config.max_reports)
        return await self.intake(Incoming(name, signed.device, signed.signature,
                                          device_pseudonym(name, signed.device), env,
                                          await self.plan(name, env.spec_version)))

    async def _body(self, request: web.BaseRequest) -> bytes:
        """The request's body, within the body timeout unless it has all arrived already (the common case: no
        timer)."""
        if request.content.is_eof():
            return await request.read()
        try:
            async with asyncio.timeout(self.config.body_timeout_s):
                return await request.read()
        except TimeoutError:
            raise Refusal(408, SLOW_BODY, f"the body did not arrive within {self.config.body_timeout_s:g} s") \
                from None

    async def _intake_many(self, items: Sequence[Incoming]) -> list[Accepted | Refusal]:
        """Steps 3-5 for many requests: one vectorised check, one Redis round trip, one message per partition."""
        checks = check_many([(i.envelope, i.plan, i.pseudonym) for i in items], now_ms())
        results: list[Checked | Accepted | Refusal] = list(checks)  # each Checked becomes an Accepted or a Refusal
        admits, admitted = [], []
        for k, (item, checked) in enumerate(zip(items, results, strict=True)):
            if isinstance(checked, Checked):
                spec = checked.plan.spec
                starts = tuple(checked.window_starts.tolist()) if spec.one_report_per_window else ()
                admits.append(Admit(item.collection, item.device, item.signature, dedupe_window(spec), spec.version,
                                    starts, mark_ttl_ms(spec)))
                admitted.append(k)
        kept: list[tuple[int, Checked, list[str], list[int]]] = []
        for k, admit, answer in zip(admitted, admits, await self.admission.admit(admits), strict=True):
            checked = results[k]
            assert isinstance(checked, Checked)
            if isinstance(answer, int):
                results[k] = _admission_refusal(answer, self.config.rate_per_s)
                continue
            marks = admit.marks
            if answer:
                positions = checked.rows[answer].tolist()  # in the request
                if len(answer) == len(checked):
                    results[k] = Refusal(409, DUPLICATE, "the device already reported in the window of every report",
                                         _verdicts(checked, positions))
                    continue
                used = np.zeros(len(checked), dtype=bool)
                used[answer] = True
                checked = without_rows(checked, used)
                marks = [m for m, u in zip(marks, used.tolist(), strict=True) if not u]
                answer = positions
            kept.append((k, checked, marks, answer))
        groups: dict[tuple[str, int, int], list[tuple[int, Checked, list[str], list[int]]]] = {}
        pseudonyms = np.fromiter((items[k].pseudonym for k, *_ in kept), dtype=np.uint64, count=len(kept))
        counts = np.fromiter((c.plan.spec.partitions for _, c, _, _ in kept), dtype=np.int64, count=len(kept))
        partitions = np.zeros(len(kept), dtype=np.int64)
        for count in np.unique(counts).tolist():  # one vectorised pass per partition count (usually one)
            partitions[counts == count] = device_partitions(pseudonyms[counts == count], count)
        for member, partition in zip(kept, partitions.tolist(), strict=True):
            spec = member[1].plan.spec
            if spec.shuffle is not None:  # to the shuffler, anonymous, on any partition: nothing ties it to a device
                k, checked, marks, answer = member
                member = (k, anonymous(checked), marks, answer)
                groups.setdefault((spec.raw_topic, secrets.randbelow(spec.partitions), spec.version),
                                  []).append(member)
                continue
            groups.setdefault((report_topic(spec.name), partition, spec.version), []).append(member)
        submitted = [(members, self._submit(topic, partition, members))
                     for (topic, partition, _), members in groups.items()]
        outcomes = await asyncio.gather(*(waiter for _, waiter in submitted), return_exceptions=True)
        released: list[str] = []
        failures = [stored for stored in outcomes if isinstance(stored, BaseException)
                    and not isinstance(stored, Refusal)]
        for (members, _), stored in zip(submitted, outcomes, strict=True):
            if isinstance(stored, Refusal):
                released += [m for _, _, marks, _ in members for m in marks]
                for k, _, _, _ in members:
                    results[k] = stored
                continue
            if isinstance(stored, BaseException):
                continue
            EDGE_REPORTS.labels("accepted", "").inc(sum(len(checked) for _, checked, _, _ in members))
            for k, checked, _, duplicates in members:
                verdicts = _verdicts(checked, duplicates)
                results[k] = Accepted(len(checked), duplicates, stored, verdicts)
                for reason in verdicts:
                    if reason != ADMITTED:
                        EDGE_REPORTS.labels("rejected", reason).inc()
        await self.admission.release(released)
        if failures:
            raise failures[0]  # not a Refusal (the forwarder settles with none): every request of the turn gets it
        return results  # type: ignore[return-value]  # every Checked is replaced above (or the turn raised)

    def _submit(self, topic: str, partition: int,
                members: list[tuple[int, Checked, list[str], list[int]]]) -> asyncio.Future[str]:
        """Step 5 for the requests of one partition: a future of where their reports are safe, or of the Refusal
        (their window marks are then released)."""
        rows = sum(len(checked) for _, checked, _, _ in members)
        try:
            return self.forwarder.submit(topic, partition, [c.envelope for _, c, _, _ in members], rows)
        except Refusal as refusal:
            refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            refused.set_exception(refusal)
            return refused

    def refresh_if_stale(self) -> None:
        """Re-read the published specs off the loop when devices may be asking about stale versions."""
        if self.plans.stale() and not self._refreshing:
            self._refreshing = True
            future = asyncio.get_running_loop().run_in_executor(None, self.plans.refresh)
            future.add_done_callback(lambda _: setattr(self, "_refreshing", False))

    async def start(self) -> None:
        """Start forwarding, and load the published specs before the first requests (/readyz waits for them:
        misses under load would each wait for a read of the specs topic)."""
        await self.forwarder.start()
        asyncio.get_running_loop().run_in_executor(None, self.plans.refresh)

    async def stop(self) -> None:
        """Flush or spool what the forwarder holds; close Redis; leave the processes' summed gauges."""
        await self.forwarder.stop()
        await self.redis.aclose()
        if os.environ.get(MULTIPROCESS_DIR):
            mark_process_dead(os.getpid())

    def ready(self) -> web.Response:
        """Ready: the published specs are loaded, Kafka answers and the spool has room."""
        reasons = [r for r, bad in (("loading the published specs", not self.plans.loaded),
                                    ("Kafka unreachable", not self.forwarder.kafka_up),
                                    ("spool full", self.spool.full)) if bad]
        return _json({"ready": not reasons, "reasons": reasons, "spool_bytes": self.spool.size},
                     503 if reasons else 200)


def _key(path: Path | None, load: Callable[[Path], T]) -> T | None:
    """A key the join endpoints need, or None (those endpoints answer 503) when it is not configured or readable."""
    if path is None:
        return None
    try:
        return load(path)
    except SigningError as exc:
        log.warning("device join endpoints unavailable: %s", exc)
        return None


def _cors(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin", "Access-Control-Expose-Headers": CORS_EXPOSED}


async def _not_found() -> web.Response:
    return _json({"error": "not found"}, 404)


def _only(method: str, allowed: str, handler: Callable[[], Awaitable[web.Response]]
          ) -> Callable[[], Awaitable[web.Response]]:
    """`handler` for its method, a 405 for any other (HEAD goes with GET)."""
    if method == allowed or (allowed == "GET" and method == "HEAD"):
        return handler

    async def not_allowed() -> web.Response:
        return _json({"error": "method not allowed"}, 405, {"Allow": allowed})
    return not_allowed


def _admission_refusal(code: int, rate_per_s: int) -> Refusal:
    if code == REPLAYED:
        return Refusal(401, REPLAY_REASON, "this signature was used before (replayed request)")
    if code == RATE_LIMITED:
        return Refusal(429, RATE_REASON, f"more than {rate_per_s} requests per second")
    return Refusal(401, UNAUTHORIZED, "unknown or revoked device")


def _verdicts(checked: Checked, duplicates: Sequence[int]) -> list[str]:
    """The verdict on each report of a request: its refusal by the checks, DUPLICATE at `duplicates` (positions in
    the request: windows the device already used), else ADMITTED."""
    verdicts = [v or ADMITTED for v in checked.verdicts]
    for d in duplicates:
        verdicts[d] = DUPLICATE
    return verdicts


def _refused(request_id: str, refusal: Refusal) -> web.Response:
    headers = {"X-Request-Id": request_id}
    if refusal.status in RETRY_AFTER_S:
        headers["Retry-After"] = str(RETRY_AFTER_S[refusal.status])
    answer: dict[str, object] = {"request_id": request_id, "reason": refusal.reason, "error": refusal.detail}
    if refusal.verdicts:
        answer["verdicts"] = refusal.verdicts
    return _json(answer, refusal.status, headers)


def _json(value: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), status=status, headers=headers, content_type=JSON)


class Routes:
    """The edge's HTTP surface on aiohttp's low-level server (no router or middleware layer: a third less CPU per
    request, measured): the report endpoint with request ids, refusals as JSON and metrics, and the probes."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self._ids = itertools.count()
        self._id_prefix = secrets.token_hex(4)  # request ids: unique per process start, a counter after it

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer, with CORS headers for a browser page of an allowed origin (`EdgeConfig.cors_origins`)."""
        origin = request.headers.get("Origin")
        if origin is None or not self.edge.config.cors_origins:
            return await self.route(request)
        allowed = origin in self.edge.config.cors_origins
        if request.method == "OPTIONS":  # a preflight: what the page may send
            if not allowed:
                return _json({"error": f"origin {origin[:100]!r} is not allowed"}, 403)
            return web.Response(status=204, headers={**_cors(origin), **CORS_PREFLIGHT})
        response = await self.route(request)
        if allowed:
            response.headers.update(_cors(origin))
        return response

    async def route(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer to a request, by its path and method."""
        parts = request.path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "v1", "collections"] and parts[3] and parts[4] == "reports":
            if request.method != "POST":
                return _json({"error": "method not allowed"}, 405, {"Allow": "POST"})
            return await self.report(request, parts[3])
        if parts[:2] == ["", "v1"] and len(parts) > 2:
            return await self.answer(request, self.join_route(request, parts))
        if request.method not in ("GET", "HEAD"):
            return _json({"error": "not found"}, 404)
        if request.path == "/healthz":
            return _json({"alive": True})
        if request.path == "/readyz":
            return self.edge.ready()
        if request.path == "/metrics":
            refusal = await self.edge.tokens.refusal(request.headers.getall("Authorization", []), Scope.METRICS)
            if refusal is not None:
                return _json({"error": refusal.error}, refusal.status, {"WWW-Authenticate": refusal.challenge})
            EDGE_SPOOL_BYTES.set(self.edge.spool.size)
            EDGE_IN_FLIGHT.set(self.edge.forwarder.in_flight)
            return web.Response(body=metrics_text(), headers={"Content-Type": CONTENT_TYPE_LATEST})
        if request.path == "/openapi.json":
            return web.Response(body=OPENAPI.read_bytes(), content_type=JSON)
        return _json({"error": "not found"}, 404)

    def join_route(self, request: web.BaseRequest, parts: list[str]) -> Callable[[], Awaitable[web.Response]]:
        """The handler of a join protocol request (`ldpstream.edge.join`), or of its 404/405."""
        method = request.method
        if parts == ["", "v1", "enroll"]:
            return _only(method, "POST", lambda: self.enroll(request))
        if len(parts) == 4 and parts[2] == "collections" and parts[3]:
            return _only(method, "GET", lambda: self.pointer(request, parts[3]))
        if len(parts) == 6 and parts[2] == "collections" and parts[4] == "specs" and parts[5].isdigit():
            return _only(method, "GET", lambda: self.spec(parts[3], int(parts[5][:12])))
        if len(parts) == 6 and parts[2] == "collections" and parts[4] == "devices":
            return _only(method, "DELETE", lambda: self.leave(request, parts[3], parts[5]))
        if len(parts) == 4 and parts[2] == "strategies":
            return _only(method, "GET", lambda: self.strategy(parts[3]))
        if len(parts) >= 4 and parts[2] == "jobs":
            return self.edge.training.route(request, parts)
        return _not_found

    async def enroll(self, request: web.BaseRequest) -> web.Response:
        if request.content_length is None or request.content_length > MAX_ENROL_BODY:
            raise Refusal(413, TOO_LARGE, f"an enrolment is at most {MAX_ENROL_BODY} bytes, with a Content-Length")
        try:
            body = await self.edge._body(request)
            credential = await self.edge.join.enroll(body, request.remote or "", now_ms())
        except Refusal as refusal:
            EDGE_ENROLMENTS.labels("refused", refusal.reason).inc()
            raise
        EDGE_ENROLMENTS.labels("enrolled", "").inc()
        return _json(credential.to_json(), 201)

    async def pointer(self, request: web.BaseRequest, name: str) -> web.Response:
        if self.edge.plans.newest(name) is None:  # a collection just published: read the topic (off the loop)
            await asyncio.get_running_loop().run_in_executor(None, self.edge.plans.find_newest, name)
        self.edge.refresh_if_stale()
        signed = self.edge.join.pointer(name, now_ms())
        if signed is None:
            return _json({"error": f"no published collection {name!r}"}, 404)
        headers = {"ETag": signed.etag, "Cache-Control": "no-cache", "LDP-Signature": block_header(signed.block)}
        if request.headers.get("If-None-Match") == signed.etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=signed.body, content_type=JSON, headers=headers)

    async def spec(self, name: str, version: int) -> web.Response:
        plan = self.edge.join.spec(name, version)
        if plan is None:
            return _json({"error": f"no published spec {name}@{version}"}, 404)
        etag = f'"{hashlib.sha256(plan.signed).hexdigest()}"'
        return web.Response(body=plan.signed, content_type=JSON,
                            headers={**IMMUTABLE, "ETag": etag, "LDP-Signature": block_header(plan.block)})

    async def strategy(self, content_hash: str) -> web.Response:
        data = self.edge.join.strategy(content_hash)
        if data is None:
            return _json({"error": f"no strategy {content_hash[:16]} pinned by a published spec"}, 404)
        return web.Response(body=data, content_type="application/octet-stream", headers=IMMUTABLE)

    async def leave(self, request: web.BaseRequest, name: str, device: str) -> web.Response:
        await self.edge.join.leave(name, device, request.headers.get("Authorization"), request.path, now_ms())
        return web.Response(status=204)

    async def answer(self, request: web.BaseRequest, handler: Callable[[], Awaitable[web.Response]]) -> web.Response:
        """A join request's answer with its request id; refusals as JSON, counted like the reports'."""
        request_id = self.next_id()
        try:
            response = await handler()
            EDGE_REQUESTS.labels(str(response.status), "").inc()
        except Refusal as refusal:
            EDGE_REQUESTS.labels(str(refusal.status), refusal.reason).inc()
            response = _refused(request_id, refusal)
        except REDIS_ERRORS as exc:
            log.warning("Redis unavailable: %s", exc)
            response = _refused(request_id, Refusal(503, "redis_unavailable", "device state unavailable"))
        except Exception:
            log.exception("request %s failed", request_id)
            response = _json({"request_id": request_id, "error": "internal error"}, 500)
        response.headers["X-Request-Id"] = request_id
        return response

    def next_id(self) -> str:
        """A new request id (unique per process start)."""
        return f"{self._id_prefix}{next(self._ids):08x}"

    async def report(self, request: web.BaseRequest, name: str) -> web.Response:
        """A report request's answer: the edge's, or its refusal with the reason; an unexpected error is logged
        and answered 500."""
        request_id = self.next_id()
        started = time.perf_counter()
        try:
            response = await self.edge.report(request, name)
            response.headers["X-Request-Id"] = request_id
            EDGE_REQUESTS.labels(str(response.status), "").inc()
        except Refusal as refusal:
            EDGE_REQUESTS.labels(str(refusal.status), refusal.reason).inc()
            if refusal.status < 500 and refusal.status not in (401, 429):
                EDGE_REPORTS.labels("rejected", refusal.reason).inc()
            response = _refused(request_id, refusal)
            if refusal.status == 408:  # the rest of the body may still come: the connection cannot be reused
                response.force_close()
        except web.HTTPRequestEntityTooLarge:
            response = _refused(request_id, Refusal(413, TOO_LARGE, "body too large"))
        except REDIS_ERRORS as exc:
            log.warning("Redis unavailable: %s", exc)
            response = _refused(request_id, Refusal(503, "redis_unavailable", "device state unavailable"))
        except Exception:
            log.exception("request %s failed", request_id)
            response = _json({"request_id": request_id, "error": "internal error"}, 500,
                             {"X-Request-Id": request_id})
        newest = self.edge.plans.newest(name)
        if newest is not None:  # devices refetch their spec when it moved on
            response.headers[VERSION_HEADER] = str(newest.spec.version)
        EDGE_SECONDS.observe(time.perf_counter() - started)
        return response


class CappedServer(web.Server):
    """aiohttp's low-level server for `routes`, which answers a connection beyond `max_connections` open ones with
    503 and closes it before reading anything."""

    def __init__(self, routes: Routes, *, max_connections: int, **kwargs: object) -> None:
        super().__init__(routes, **kwargs)  # type: ignore[arg-type]
        self.routes = routes
        self.max_connections = max_connections
        self.open = 0  # counted here: aiohttp may drop a closed handler from its own table only later

    def __call__(self) -> asyncio.BaseProtocol:  # type: ignore[override]
        if self.open >= self.max_connections:
            EDGE_REQUESTS.labels("503", TOO_MANY_CONNECTIONS).inc()
            return _TurnedAway(self.routes.next_id())
        return super().__call__()

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.open += 1
        super().connection_made(handler, transport)

    def connection_lost(self, handler: web.RequestHandler, exc: BaseException | None = None) -> None:  # type: ignore[override]
        self.open -= 1
        super().connection_lost(handler, exc)


class _TurnedAway(asyncio.Protocol):
    """A connection over the cap: a 503 refusal (request id, reason, Retry-After), then closed."""

    ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nX-Request-Id: %s\r\nRetry-After: %d\r\n"
              b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        body = msgspec.json.encode({"request_id": self.request_id, "reason": TOO_MANY_CONNECTIONS,
                                    "error": "too many open connections"})
        transport.write(self.ANSWER % (self.request_id.encode(), RETRY_AFTER_S[503], len(body), body))
        transport.close()


def connection_cap(wanted: int) -> int:
    """`wanted`, or fewer so that the process keeps `RESERVED_DESCRIPTORS` of its open-file limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else max(1, min(wanted, soft - RESERVED_DESCRIPTORS))


class CannotListen(RuntimeError):
    """The edge's address cannot be bound (the port is taken, the address is not this machine's)."""


async def run(config: EdgeConfig, host: str, port: int, reuse_port: bool = False,
              ssl_context: ssl.SSLContext | None = None) -> None:
    """Serve until SIGINT/SIGTERM, then stop taking connections, finish the requests in flight, and flush or
    spool what the forwarder holds."""
    try:  # first: a port taken is one line before anything else starts
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=1024, reuse_port=reuse_port)
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    edge = Edge(config)
    await edge.start()
    loop = asyncio.get_running_loop()
    server = CappedServer(Routes(edge), auto_decompress=False,  # the signature covers the sent bytes;
                          request_factory=lambda message, payload, handler, writer, task: web.BaseRequest(
                              message, payload, handler, writer, task, loop,  # intake.inflate decompresses them
                              client_max_size=config.max_body_bytes),
                          keepalive_timeout=config.idle_timeout_s,  # also closes a connection idle from its start
                          lingering_time=config.body_timeout_s,  # after a refusal, the rest of a body: dropped
                          max_connections=connection_cap(config.max_connections))
    runner = web.ServerRunner(server, handle_signals=False, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=ssl_context).start()
    stop = asyncio.Event()

    def stopping() -> None:
        exit_within(STOP_S)  # a stop that hangs (Redis gone) is cut short: what devices were told is safe is
        stop.set()  # in Kafka or the spool already

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await edge.stop()


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) with a PEM certificate chain and its key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def serve(config: EdgeConfig, host: str, port: int, reuse_port: bool = False, loop: str = "uvloop",
          ssl_context: ssl.SSLContext | None = None) -> None:
    """Run one edge process until SIGINT/SIGTERM (`reuse_port`: several processes share the port; `loop`:
    "uvloop" or "asyncio", the event loop; `ssl_context`: serve HTTPS)."""
    runner = uvloop.run if loop == "uvloop" else asyncio.run
    runner(run(config, host, port, reuse_port, ssl_context))
