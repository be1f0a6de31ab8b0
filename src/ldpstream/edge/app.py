"""The edge's HTTP service (aiohttp): `POST /v1/collections/{name}/reports`, the join protocol, `/healthz`,
`/readyz`, `/metrics`, `/openapi.json` (the protocol, `src/ldpstream/edge/openapi.json`). The routes are in
`ldpstream.edge.routes`, each router a class that `ROUTERS` lists: a new family of routes is a router in a module of
its own and one line in `ROUTERS`.

A report request, in order (each refusal answers with its status and reason, counts it, and changes nothing):
1. size: a Content-Length is required (411) and bounded (413), and the body is read up to it within the body
   timeout (408, and the connection closed; after any refusal the rest of a body is read and dropped for at most
   that long too, so the client can read its answer);
2. authentication (`ldpstream.edge.admission`, `ldpstream.contract.auth`): the Authorization header names a device
   whose key signed this method, path, time and body (401; the key is derived, so no lookup);
3. parsing (`ldpstream.edge.intake`): 400/413/415; then the requests that got this far in one event-loop turn go on
   together (`ldpstream.edge.coalesce`), each still answered alone: their checks against the published spec (404, 400;
   the aggregator's schema code) in one vectorised pass, a report that fails a per-report check refused alone with
   its verdict (every report of the request failing: 400);
4. admission (`ldpstream.edge.admission`: `ldpstream.edge.devices.Admission`, one Redis script over the turn's
   requests): not enrolled or revoked, replay (401), rate (429), and reports whose window the device already used
   (dropped; all of them: 409);
5. routing (`ldpstream.edge.routing`: the topic and partition the collection's path names) and forwarding
   (`ldpstream.edge.forward`), the turn's reports for one partition as one submission: answered, with the verdict
   on each report of the request (`docs/reference/protocol.md`, "Delivery"), 200 once Kafka acknowledged, 202 once
   fsynced in the spool, or 503/507 (the window marks released, so the device can send again).
Every answer carries `X-Request-Id`; refusals that a retry can cure carry Retry-After.

Slow or idle clients cannot hold the process's connections: a connection that has not completed a request within
the idle timeout of its start or of its last answer is closed (half-sent headers included), and beyond
`max_connections` open connections a new one is answered 503 and closed, so a flood of idle sockets cannot take the
descriptors Kafka, Redis and the spool need.
"""


from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import msgspec
import uvloop
from aiohttp import web
from prometheus_client.multiprocess import mark_process_dead

from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.edge.admission import Incoming, admit, authenticate
from ldpstream.edge.answers import RETRY_AFTER_S, RequestIds, answered, json_answer, not_found
from ldpstream.edge.coalesce import Coalesce
from ldpstream.edge.config import EdgeConfig
from ldpstream.edge.devices import Admission
from ldpstream.edge.forward import Forwarder
from ldpstream.edge.intake import (
    JSON,
    TOO_MANY_CONNECTIONS,
    Checked,
    Refusal,
    check_many,
    inflate,
    json_version,
    media_type,
    parse,
)
from ldpstream.edge.join import Join
from ldpstream.edge.keyring import Keyring
from ldpstream.edge.plans import EdgePlan, edge_plans
from ldpstream.edge.routes import JoinRoutes, ProbeRoutes, ReportRoutes, Router
from ldpstream.edge.routing import Accepted, deliver, destinations
from ldpstream.edge.spool import Spool
from ldpstream.edge.training import TrainingEdge, TrainingRoutes
from ldpstream.runtime.join_keys import load_enrolment_keys
from ldpstream.runtime.metrics import EDGE_REQUESTS, MULTIPROCESS_DIR
from ldpstream.runtime.redis import async_redis_client
from ldpstream.runtime.signing import SigningError, load_signing_key
from ldpstream.runtime.supervisor import exit_within
from ldpstream.runtime.tokens import TokenVerifier

log = logging.getLogger(__name__)
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


class Edge:
    """One edge process's state: published plans, Redis admission, the forwarder and its spool."""

    def __init__(self, config: EdgeConfig) -> None:
        self.config = config
        self.plans = edge_plans(config.bootstrap)
        self.redis = async_redis_client(config.redis_url, timeout_s=5.0)
        self.admission = Admission(self.redis, Keyring(config.keyring), config.rate_per_s)
        self.tokens = TokenVerifier(self.redis)  # of /metrics scrapes (the API's tokens, scope metrics)
        self.spool = Spool(config.spool_dir, config.spool_bytes)
        self.intake: Coalesce[Incoming, Accepted] = Coalesce(self._intake_many)
        self.forwarder = Forwarder(config.bootstrap, self.spool, linger_s=config.linger_s,
                                   max_in_flight=config.max_in_flight,
                                   delivery_timeout_ms=config.delivery_timeout_ms)
        self._refreshing = False
        self._misses = ThreadPoolExecutor(1, thread_name_prefix="edge-spec-misses")
        self.join = Join(self.plans, self.redis, self.admission.keyring, _key(config.pointer_key, load_signing_key),
                         _key(config.enrolment_keys, load_enrolment_keys), config.enrol_limits)
        self.training = TrainingEdge(config.bootstrap, self.redis, self.admission)  # /v1/jobs/...

    async def plan(self, name: str, version: int) -> EdgePlan | None:
        """The published plan; on a miss, as a read of the specs topic begun since then found it."""
        plan = self.plans.cached(name, version)
        if plan is None:
            await self.read_specs_since(time.monotonic())
            plan = self.plans.cached(name, version)
        return plan

    async def read_specs_since(self, arrived: float) -> None:
        """Wait for a read of the specs topic begun at or after `arrived` (monotonic seconds): a spec published
        before a request arrived is then known, on every edge process. Off the loop, on the one thread misses share
        (they wait up to the plans' `refresh_s`; the default pool, which spools reports, never waits for them)."""
        await asyncio.get_running_loop().run_in_executor(self._misses, self.plans.read_since, arrived)

    async def accept(self, name: str, method: str, path: str, authorization: str | None,
                     content_encoding: str | None, content_type: str, body: bytes) -> Accepted:
        """Steps 2-5 for a request's headers and body, apart from the HTTP server; a Refusal otherwise (steps 3-5
        for the requests of a loop turn together: `_intake_many`)."""
        signed = authenticate(self.admission, name, method, path, authorization, body)
        data = inflate(body, content_encoding, self.config.max_inflated_bytes)
        version = json_version(data) if media_type(content_type) == JSON else None
        json_plan = None if version is None else await self.plan(name, version)
        env = parse(data, content_type, name, json_plan, self.config.max_reports)
        return await self.intake(Incoming(name, signed, device_pseudonym(name, signed.device), env,
                                          await self.plan(name, env.spec_version)))

    async def _intake_many(self, items: Sequence[Incoming]) -> list[Accepted | Refusal]:
        """Steps 3-5 for many requests: one vectorised check, one Redis round trip, one message per partition."""
        checks = check_many([(i.envelope, i.plan, i.pseudonym) for i in items], now_ms())
        results: list[Checked | Accepted | Refusal] = list(checks)  # each Checked becomes an Accepted or a Refusal
        admitted, turned_away = await admit(self.admission, items, checks, self.config.rate_per_s)
        groups = destinations(admitted, [items[a.index].pseudonym for a in admitted])
        for k, answer in [*turned_away.items(), *(await deliver(self.forwarder, self.admission, groups)).items()]:
            results[k] = answer
        return results  # type: ignore[return-value]  # every Checked is replaced above (or the turn raised)

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
        self._misses.shutdown(wait=False, cancel_futures=True)
        await self.redis.aclose()
        if os.environ.get(MULTIPROCESS_DIR):
            mark_process_dead(os.getpid())

    def ready(self) -> web.Response:
        """Ready: the published specs are loaded, Kafka answers and the spool has room."""
        reasons = [r for r, bad in (("loading the published specs", not self.plans.loaded),
                                    ("Kafka unreachable", not self.forwarder.kafka_up),
                                    ("spool full", self.spool.full)) if bad]
        return json_answer({"ready": not reasons, "reasons": reasons, "spool_bytes": self.spool.size},
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


# The edge's routers, asked in turn (`ldpstream.edge.routes.Router`): a new family of routes is one line here
ROUTERS: tuple[Callable[[Edge, RequestIds], Router], ...] = (ReportRoutes, JoinRoutes, TrainingRoutes, ProbeRoutes)


class Routes:
    """The edge's HTTP surface on aiohttp's low-level server (no router or middleware layer: a third less CPU per
    request, measured): each request to the first of `ROUTERS` that serves it, CORS for allowed origins, and a 404
    for the rest (with a request id under /v1/)."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.ids = RequestIds()
        self.routers = [make(edge, self.ids) for make in ROUTERS]

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer, with CORS headers for a browser page of an allowed origin (`EdgeConfig.cors_origins`)."""
        origin = request.headers.get("Origin")
        if origin is None or not self.edge.config.cors_origins:
            return await self.route(request)
        allowed = origin in self.edge.config.cors_origins
        if request.method == "OPTIONS":  # a preflight: what the page may send
            if not allowed:
                return json_answer({"error": f"origin {origin[:100]!r} is not allowed"}, 403)
            return web.Response(status=204, headers={**_cors(origin), **CORS_PREFLIGHT})
        response = await self.route(request)
        if allowed:
            response.headers.update(_cors(origin))
        return response

    async def route(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer to a request, by its path and method."""
        parts = request.path.split("/")
        for router in self.routers:
            handler = router.match(request, parts)
            if handler is not None:
                return await handler()
        if parts[:2] == ["", "v1"] and len(parts) > 2:
            return await answered(self.ids.next(), not_found)
        return json_answer({"error": "not found"}, 404)


def _cors(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin", "Access-Control-Expose-Headers": CORS_EXPOSED}


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
            return _TurnedAway(self.routes.ids.next())
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
