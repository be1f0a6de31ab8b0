"""API tokens: the pure parts (parsing, records, checks) and the store and verifier over the real Redis.

Expiry and the cache's age run on injected clocks, so no test waits or depends on timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpstream.runtime.redis import async_redis_client, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.tokens import (
    EXPIRED,
    INVALID,
    MAX_AGE_S,
    REVOKED,
    TOKENS_KEY,
    Scope,
    TokenError,
    TokenRecord,
    TokenVerifier,
    check,
    digest,
    new_token,
    parse_bearer,
    parse_ttl,
)
from tests.tokens import ApiTokens, api_tokens

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000


def secret_of(token: str) -> str:
    """The secret of `ldp_<12 hex>_<secret>`."""
    return token[len("ldp_") + 13:]


def test_a_new_token_is_its_id_and_a_secret_whose_hash_alone_is_in_the_record() -> None:
    issued = new_token([Scope.READ, Scope.METRICS], "grafana", T0, HOUR_MS)
    token_id, secret = parse_bearer(f"Bearer {issued.token}")  # type: ignore[misc]
    assert issued.token == f"ldp_{token_id}_{secret}" and token_id == issued.record.id
    assert len(base64.urlsafe_b64decode(secret + "=")) == 32
    assert issued.record == TokenRecord(token_id, digest(secret), frozenset({Scope.READ, Scope.METRICS}), "grafana",
                                        T0, T0 + HOUR_MS)
    assert secret not in issued.record.to_json()
    assert TokenRecord.from_json(token_id, issued.record.to_json()) == issued.record


def test_a_token_needs_a_scope() -> None:
    with pytest.raises(ValueError, match="at least one scope"):
        new_token([], "", T0, None)


@pytest.mark.parametrize("header", ["Bearer {t}", "bearer {t}", "BEARER  {t}"])
def test_the_scheme_is_case_insensitive(header: str) -> None:
    issued = new_token([Scope.READ], "", T0, None)
    assert parse_bearer(header.format(t=issued.token)) is not None


SHAPED = "ldp_0123456789ab_" + "A" * 43  # the shape of a token


def test_a_token_of_the_right_shape_parses() -> None:
    assert parse_bearer(f"Bearer {SHAPED}") == ("0123456789ab", "A" * 43)


@pytest.mark.parametrize("header", [
    "", "Bearer", "Bearer ", SHAPED, f"Basic {SHAPED}", f"Bearer {SHAPED} ", f" Bearer {SHAPED}", f"Bearer {SHAPED}\n",
    f"Bearer {SHAPED}x", f"Bearer {SHAPED}=", f"Bearer {SHAPED[:-1]}", f"Bearer\t{SHAPED}", f"Bearer{SHAPED}",
    f"Bearer {SHAPED},Bearer {SHAPED}", f"Bearer {SHAPED.replace('ldp_', 'LDP_')}",
    f"Bearer {SHAPED.replace('ab_', 'AB_')}", f"Bearer {SHAPED.replace('A', chr(0x391))}",  # Greek capital alpha
    f"Bearer {SHAPED.replace('0', chr(0x660))}",  # Arabic-Indic zero: a digit, but not ASCII
])
def test_anything_but_bearer_and_one_token_parses_as_nothing(header: str) -> None:
    assert parse_bearer(header) is None


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=200), st.text(max_size=100).map(lambda s: "Bearer ldp_0123456789ab_" + s),
                 st.binary(max_size=100).map(lambda b: b.decode("utf-8", "surrogateescape"))))
def test_no_header_value_makes_the_parse_raise(header: str) -> None:
    parsed = parse_bearer(header)
    assert parsed is None or (len(parsed[0]), len(parsed[1])) == (12, 43)


def test_admin_implies_every_scope() -> None:
    admin = new_token([Scope.ADMIN], "", T0, None).record
    read = new_token([Scope.READ], "", T0, None).record
    assert all(admin.allows(s) for s in Scope)
    assert [s for s in Scope if read.allows(s)] == [Scope.READ]


def test_the_secret_is_checked_before_expiry_and_revocation() -> None:
    issued = new_token([Scope.READ], "", T0, HOUR_MS)
    secret = secret_of(issued.token)
    revoked = replace(issued.record, revoked_ms=T0 + 1)
    assert check(issued.record, secret, T0 + HOUR_MS - 1) == issued.record
    for record, at_ms, reason in [(issued.record, T0 + HOUR_MS, EXPIRED), (revoked, T0 + 2, REVOKED),
                                  (None, T0, INVALID)]:
        with pytest.raises(TokenError, match=f"^{reason}$"):
            check(record, secret, at_ms)
        if record is not None:  # with a wrong secret, only "invalid": nothing about the token's state
            with pytest.raises(TokenError, match=f"^{INVALID}$"):
                check(record, "B" * 43, at_ms)


@pytest.mark.parametrize("text, ms", [("1s", 1000), ("90m", 5_400_000), ("12h", 43_200_000),
                                      ("30d", 2_592_000_000), ("none", None)])
def test_ttl(text: str, ms: int | None) -> None:
    assert parse_ttl(text) == ms


@pytest.mark.parametrize("text", ["", "0d", "30", "d", "-1d", "1.5h", "1w", "1D", " 1d", "None", "٣d",
                                  "9999999d"])
def test_a_bad_ttl_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="a lifetime is"):
        parse_ttl(text)


GOOD = {"sha256": "a" * 64, "scopes": ["read"], "name": "x", "created_ms": 1, "expires_ms": None, "revoked_ms": None}


@pytest.mark.parametrize("change", [
    {"sha256": "A" * 64}, {"sha256": "a" * 63}, {"sha256": "é" * 64}, {"sha256": None}, {"scopes": "read"},
    {"scopes": ["root"]}, {"scopes": [["read"]]}, {"scopes": {"read": 1}}, {"name": 3}, {"created_ms": True},
    {"created_ms": 1.5}, {"created_ms": -1}, {"expires_ms": "soon"}, {"revoked_ms": False}, {"created_ms": None},
])
def test_a_malformed_record_is_a_value_error(change: dict[str, object]) -> None:
    assert TokenRecord.from_json("x", json.dumps(GOOD)).scopes == {Scope.READ}
    with pytest.raises(ValueError, match="malformed record of token x"):
        TokenRecord.from_json("x", json.dumps({**GOOD, **change}))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from([*GOOD, "other"]), inner, max_size=7), max_leaves=20).map(lambda v: json.dumps(v).encode())))
def test_no_stored_bytes_make_reading_a_record_raise_anything_but_value_error(raw: bytes) -> None:
    try:
        TokenRecord.from_json("x", raw)
    except ValueError:
        pass


# --- the store and the verifier over the real Redis -------------------------------------------------------------

@pytest.fixture
def tokens(live_services: Settings) -> Iterator[ApiTokens]:
    with api_tokens(live_services.redis) as issued:
        yield issued


@dataclass
class Clocks:
    """Injected time: `wall_ms` for expiry, `mono_s` for the cache's age."""

    wall_ms: int = T0
    mono_s: float = 0.0


def verifier(cfg: Settings, clocks: Clocks) -> TokenVerifier:
    return TokenVerifier(async_redis_client(cfg.redis, 5.0), clock=lambda: clocks.wall_ms,
                         monotonic=lambda: clocks.mono_s)


def verdicts(cfg: Settings, clocks: Clocks, steps: list[tuple[str, object]]) -> list[str]:
    """Run steps on one verifier (one event loop): ("verify", header) -> "ok" or the TokenError's message;
    ("do", fn) -> fn() (a revocation, a clock change) and "-"."""
    async def run() -> list[str]:
        tv = verifier(cfg, clocks)
        out = []
        try:
            for what, arg in steps:
                if what == "do":
                    arg()  # type: ignore[operator]
                    out.append("-")
                    continue
                try:
                    await tv.verify(arg)  # type: ignore[arg-type]
                    out.append("ok")
                except TokenError as exc:
                    out.append(str(exc))
        finally:
            await tv.close()
        return out
    return asyncio.run(run())


def test_the_store_keeps_no_secret(live_services: Settings, tokens: ApiTokens) -> None:
    issued = [tokens.issue(scopes) for scopes in ([Scope.READ], [Scope.METRICS], [Scope.ADMIN])]
    client = redis_client(live_services.redis)
    stored = b"".join(k + v for k, v in client.hgetall(TOKENS_KEY).items())
    stored += b"".join(client.dump(k) or b"" for k in client.scan_iter("ldp:api:*"))
    for i in issued:
        secret = secret_of(i.token)
        raw = base64.urlsafe_b64decode(secret + "=")
        for form in (secret.encode(), raw, raw.hex().encode(), i.token.encode()):
            assert form not in stored
        assert i.record.id.encode() in stored and i.record.sha256.encode() in stored


def test_records_list_and_revocation_keeps_its_first_time(tokens: ApiTokens) -> None:
    a = tokens.issue([Scope.READ], name="a", created_ms=T0)
    b = tokens.issue([Scope.METRICS], name="b", ttl_ms=None, created_ms=T0 + 1)
    listed = {r.id: r for r in tokens.store.records()}
    assert listed[a.record.id] == a.record and listed[b.record.id] == b.record
    assert tokens.store.revoke(a.record.id, T0 + 5) == replace(a.record, revoked_ms=T0 + 5)
    assert tokens.store.revoke(a.record.id, T0 + 9).revoked_ms == T0 + 5  # type: ignore[union-attr]
    assert {r.id: r.revoked_ms for r in tokens.store.records()}[a.record.id] == T0 + 5
    assert {r.id: r.status(T0 + 6) for r in tokens.store.records()}[b.record.id] == "active"


@pytest.mark.parametrize("token_id", ["000000000000", "nope", "", "*", "0" * 12 + "\n", "a" * 5000])
def test_revoking_an_unknown_id_finds_nothing(tokens: ApiTokens, token_id: str) -> None:
    assert tokens.store.revoke(token_id, T0) is None


def test_expiry_is_exact_on_the_injected_clock(live_services: Settings, tokens: ApiTokens) -> None:
    clocks = Clocks()
    issued = tokens.issue([Scope.READ], ttl_ms=HOUR_MS, created_ms=T0)
    header = f"Bearer {issued.token}"

    def at(ms: int) -> tuple[str, object]:
        return "do", lambda: setattr(clocks, "wall_ms", ms)

    assert verdicts(live_services, clocks, [
        ("verify", header), at(T0 + HOUR_MS - 1), ("verify", header), at(T0 + HOUR_MS), ("verify", header),
    ]) == ["ok", "-", "ok", "-", EXPIRED]


def test_a_revoked_token_stops_working_within_the_cache_bound(live_services: Settings, tokens: ApiTokens) -> None:
    clocks = Clocks()
    issued = tokens.issue([Scope.READ], created_ms=T0)
    header = f"Bearer {issued.token}"

    def age(s: float) -> tuple[str, object]:
        return "do", lambda: setattr(clocks, "mono_s", s)

    assert verdicts(live_services, clocks, [
        ("verify", header), ("do", lambda: tokens.store.revoke(issued.record.id, T0 + 1)),
        age(MAX_AGE_S - 0.001), ("verify", header),  # the cached record: still valid for at most MAX_AGE_S
        age(MAX_AGE_S), ("verify", header),
    ]) == ["ok", "-", "-", "ok", "-", REVOKED]


def test_a_new_verifier_sees_a_revocation_at_once(live_services: Settings, tokens: ApiTokens) -> None:
    issued = tokens.issue([Scope.READ], created_ms=T0)
    tokens.store.revoke(issued.record.id, T0 + 1)
    assert verdicts(live_services, Clocks(), [("verify", f"Bearer {issued.token}")]) == [REVOKED]


def test_unknown_ids_wrong_secrets_and_malformed_records_are_invalid(live_services: Settings,
                                                                     tokens: ApiTokens) -> None:
    issued = tokens.issue([Scope.READ], created_ms=T0)
    other = new_token([Scope.READ], "", T0, None)  # never stored
    wrong = f"ldp_{issued.record.id}_{secret_of(other.token)}"
    junk_id = "f" * 12
    tokens.ids.append(junk_id)
    tokens.store.redis.hset(TOKENS_KEY, junk_id, b'{"sha256": 1}')
    junk = f"ldp_{junk_id}_{'A' * 43}"
    assert verdicts(live_services, Clocks(), [("verify", f"Bearer {t}") for t in (other.token, wrong, junk)]
                    + [("verify", "Bearer"), ("verify", "")]) == [INVALID] * 5
