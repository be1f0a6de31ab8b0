"""The edge's HTTP answers: JSON bodies, refusals (request id, reason, Retry-After, verdicts), request ids, and the
wrapper that turns what a handler raises into an answer, counted."""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from ldpstream.edge.intake import JSON, Refusal
from ldpstream.runtime.metrics import EDGE_REQUESTS
from ldpstream.runtime.redis import ERRORS as REDIS_ERRORS

log = logging.getLogger(__name__)
RETRY_AFTER_S = {429: 1, 503: 2, 507: 10}
REDIS_DOWN = Refusal(503, "redis_unavailable", "device state unavailable")
Handler = Callable[[], Awaitable[web.StreamResponse]]


def json_answer(value: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=msgspec.json.encode(value), status=status, headers=headers, content_type=JSON)


def refused(request_id: str, refusal: Refusal) -> web.Response:
    """A refusal's answer: its status, reason and detail, the verdicts on the request's reports, Retry-After."""
    headers = {"X-Request-Id": request_id}
    if refusal.status in RETRY_AFTER_S:
        headers["Retry-After"] = str(RETRY_AFTER_S[refusal.status])
    answer: dict[str, object] = {"request_id": request_id, "reason": refusal.reason, "error": refusal.detail}
    if refusal.verdicts:
        answer["verdicts"] = refusal.verdicts
    return json_answer(answer, refusal.status, headers)


class RequestIds:
    """Request ids: unique per process start (a random prefix), a counter after it."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._prefix = secrets.token_hex(4)

    def next(self) -> str:
        return f"{self._prefix}{next(self._ids):08x}"


async def answered(request_id: str, handler: Handler) -> web.StreamResponse:
    """A request's answer with its request id; refusals as JSON, counted; an unexpected error logged and answered
    500."""
    try:
        response = await handler()
        EDGE_REQUESTS.labels(str(response.status), "").inc()
    except Refusal as refusal:
        EDGE_REQUESTS.labels(str(refusal.status), refusal.reason).inc()
        response = refused(request_id, refusal)
    except REDIS_ERRORS as exc:
        log.warning("Redis unavailable: %s", exc)
        response = refused(request_id, REDIS_DOWN)
    except Exception:
        log.exception("request %s failed", request_id)
        response = json_answer({"request_id": request_id, "error": "internal error"}, 500)
    response.headers["X-Request-Id"] = request_id
    return response


async def not_found() -> web.Response:
    return json_answer({"error": "not found"}, 404)


def only(method: str, allowed: str, handler: Handler) -> Handler:
    """`handler` for its method, a 405 for any other (HEAD goes with GET)."""
    if method == allowed or (allowed == "GET" and method == "HEAD"):
        return handler

    async def not_allowed() -> web.Response:
        return json_answer({"error": "method not allowed"}, 405, {"Allow": allowed})
    return not_allowed
