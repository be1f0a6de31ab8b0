"""Bearer tokens at the HTTP API, on a real socket: tokens in the real Redis, the rest stubbed (no Kafka).

The verifier runs on injected clocks (`Clocks`), so expiry and the revocation bound are tested without waiting.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.spec import load_spec
from ldpstream.readapi.api import OPEN_ROUTES, ROUTE_SCOPES, PublishedPlans, create_app
from ldpstream.runtime.redis import async_redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.tokens import (
    EXPIRED,
    INVALID,
    MAX_AGE_S,
    NO_TOKEN,
    REVOKED,
    Issued,
    Scope,
    TokenVerifier,
    new_token,
)
from tests.readapi.test_api import StubRegistry, serving
from tests.tokens import ApiTokens, api_tokens

REALM = 'Bearer realm="ldpstream"'
INVALID_TOKEN = f'{REALM}, error="invalid_token"'
ESTIMATES = "/collections/diagnostics/estimates"
SERIES = "/collections/diagnostics/series?attribute=battery_level"
NEEDS = {"/collections": "read", ESTIMATES: "read", SERIES: "read", "/jobs": "read",
         "/metrics": "metrics"}
GUARDED = list(NEEDS)
T0 = now_ms()


@dataclass
class Clocks:
    """Injected time of the verifier: `wall_ms` for expiry, `mono_s` for the age of its cache."""

    wall_ms: int = T0
    mono_s: float = 0.0


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def error(self) -> Any:
        return json.loads(self.body)["error"]


def get(url: str, path: str, *authorization: bytes | str, method: str = "GET") -> Answer:
    """A request with these Authorization header lines (any bytes but CR and LF), over a bare socket: no client
    library vets what is sent."""
    parts = urllib.parse.urlsplit(url)
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1",
             *(b"Authorization: " + (a.encode() if isinstance(a, str) else a) for a in authorization),
             b"Connection: close", b"", b""]
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(lines))
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
    return Answer(int(status_line.split()[1]), headers, body)


def bearer(issued: Issued) -> str:
    return f"Bearer {issued.token}"


def offline_app(tokens: TokenVerifier) -> web.Application:
    """The API over an empty store, one stub collection ('diagnostics') and no Kafka."""
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml")
    return create_app(MemoryStore(), PublishedPlans(StubRegistry(spec)), lambda topics: {}, {},  # type: ignore[arg-type]
                      tokens=tokens)


@dataclass(frozen=True)
class Guarded:
    url: str
    clocks: Clocks
    tokens: ApiTokens


@pytest.fixture
def guarded(live_services: Settings) -> Iterator[Guarded]:
    clocks = Clocks()
    verifier = TokenVerifier(async_redis_client(live_services.redis, 5.0), clock=lambda: clocks.wall_ms,
                             monotonic=lambda: clocks.mono_s)
    with api_tokens(live_services.redis) as tokens, serving(offline_app(verifier)) as url:
        yield Guarded(url, clocks, tokens)


def test_every_route_is_open_or_has_a_scope() -> None:
    app = offline_app(TokenVerifier(redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0")))  # never connects
    routes = {resource.canonical for resource in app.router.resources()}
    assert routes == OPEN_ROUTES | set(ROUTE_SCOPES)
    # the open routes hold no data: liveness, the OpenAPI document, the console's static pages and scripts
    assert OPEN_ROUTES == {"/healthz", "/openapi.json", "/", "/console", "/console/", "/console/collection",
                           "/console/job", "/console/static/{file}"}


@pytest.mark.parametrize("path, method", [(p, "GET") for p in [*GUARDED, "/nowhere", "/collections/x"]]
                         + [("/collections", "POST"), ("/metrics", "HEAD")])
def test_without_a_token_every_route_but_healthz_is_401(guarded: Guarded, path: str, method: str) -> None:
    answer = get(guarded.url, path, method=method)
    assert (answer.status, answer.headers["www-authenticate"]) == (401, REALM)
    if method != "HEAD":
        assert answer.error == NO_TOKEN
    assert get(guarded.url, path, "", method=method).status == 401  # an empty header is no token


def test_healthz_needs_no_token(guarded: Guarded) -> None:
    assert get(guarded.url, "/healthz").status == 200
    assert get(guarded.url, "/healthz", "Bearer nonsense").status == 200  # and ignores a bad one


def test_tokens_that_do_not_verify_are_401_invalid_token(guarded: Guarded) -> None:
    good = guarded.tokens.issue([Scope.ADMIN])
    never_stored = new_token([Scope.ADMIN], "", T0, None)
    wrong_secret = f"Bearer ldp_{good.record.id}_{never_stored.token[len('ldp_') + 13:]}"
    cases: list[tuple[str, ...]] = [("Bearer nonsense",), ("Basic dXNlcjpwYXNz",), (good.token,),
                                    (bearer(never_stored),), (wrong_secret,), (bearer(good), bearer(good)),
                                    (bearer(good) + "x",)]
    for headers in cases:
        for path in [*GUARDED, "/nowhere"]:
            answer = get(guarded.url, path, *headers)
            assert (answer.status, answer.headers["www-authenticate"], answer.error) == (401, INVALID_TOKEN,
                                                                                         INVALID), (headers, path)
    assert get(guarded.url, "/collections", bearer(good)).status == 200


def test_an_expired_token_is_401_from_its_expiry_on(guarded: Guarded) -> None:
    issued = guarded.tokens.issue([Scope.READ], ttl_ms=60_000, created_ms=T0)
    guarded.clocks.wall_ms = T0 + 59_999
    assert get(guarded.url, "/collections", bearer(issued)).status == 200
    guarded.clocks.wall_ms = T0 + 60_000
    answer = get(guarded.url, "/collections", bearer(issued))
    assert (answer.status, answer.headers["www-authenticate"], answer.error) == (401, INVALID_TOKEN, EXPIRED)


def test_a_revoked_token_is_401_within_the_cache_bound(guarded: Guarded) -> None:
    issued = guarded.tokens.issue([Scope.READ], created_ms=T0)
    assert get(guarded.url, "/collections", bearer(issued)).status == 200
    guarded.tokens.store.revoke(issued.record.id, T0 + 1)
    guarded.clocks.mono_s = MAX_AGE_S  # the record read before the revocation is now too old to use
    answer = get(guarded.url, "/collections", bearer(issued))
    assert (answer.status, answer.headers["www-authenticate"], answer.error) == (401, INVALID_TOKEN, REVOKED)


@pytest.mark.parametrize("scopes, allowed", [
    ([Scope.READ], {"/collections", ESTIMATES, SERIES, "/jobs"}),
    ([Scope.METRICS], {"/metrics"}),
    ([Scope.READ, Scope.METRICS], set(GUARDED)),
    ([Scope.ADMIN], set(GUARDED)),
])
def test_a_token_reaches_the_routes_of_its_scopes_and_gets_403_elsewhere(guarded: Guarded, scopes: list[Scope],
                                                                         allowed: set[str]) -> None:
    issued = guarded.tokens.issue(scopes)
    for path in GUARDED:
        answer = get(guarded.url, path, bearer(issued))
        if path in allowed:
            assert answer.status == 200, (path, answer.body)
            continue
        scope = NEEDS[path]
        assert answer.status == 403
        assert answer.headers["www-authenticate"] == f'{REALM}, error="insufficient_scope", scope="{scope}"'
        assert answer.error == f"this token lacks the scope {scope!r}"
    assert get(guarded.url, "/nowhere", bearer(issued)).status == 404  # a valid token of any scope learns 404


def test_a_redis_that_does_not_answer_is_503_not_a_pass(live_services: Settings) -> None:
    with api_tokens(live_services.redis) as tokens, \
            serving(offline_app(TokenVerifier(async_redis_client("redis://127.0.0.1:1/0", 1.0)))) as url:
        answer = get(url, "/collections", bearer(tokens.issue([Scope.ADMIN])))
        assert answer.status == 503 and answer.error.startswith("the store or Kafka is unavailable")
        assert get(url, "/healthz").status == 200


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
HEADERS = st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.text(max_size=120).map(lambda t: ("Bearer " + t).encode("utf-8", "surrogatepass").replace(b"\r", b"")
                              .replace(b"\n", b"")),
    st.tuples(st.sampled_from(["Bearer ", "bearer ", "Bearer  ", "Bearer", "Token ", ""]),
              st.text("0123456789abcdefABCDEF", min_size=10, max_size=14),
              st.text(B64 + "=.~+/", min_size=40, max_size=46)).map(lambda t: f"{t[0]}ldp_{t[1]}_{t[2]}".encode()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=HEADERS, path=st.sampled_from([*GUARDED, "/nowhere"]))
def test_no_authorization_header_is_a_500(guarded: Guarded, header: bytes, path: str) -> None:
    answer = get(guarded.url, path, header)
    assert answer.status in (400, 401), answer
    if answer.status == 401:
        assert answer.headers["www-authenticate"] in (REALM, INVALID_TOKEN)
        assert answer.error in (NO_TOKEN, INVALID)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=st.text(B64, min_size=43, max_size=43))
def test_an_existing_id_with_any_other_secret_is_401(guarded: Guarded, secret: str) -> None:
    if not guarded.tokens.ids:
        guarded.tokens.issue([Scope.ADMIN])
    answer = get(guarded.url, "/collections", f"Bearer ldp_{guarded.tokens.ids[0]}_{secret}")
    assert (answer.status, answer.error) == (401, INVALID)
