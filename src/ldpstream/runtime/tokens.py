"""Bearer tokens of the HTTP API: issued by an admin, kept hashed in Redis, checked on every request.

A token is `ldp_<id>_<secret>`: `id` is 12 hex characters (48 random bits; `ldp tokens list` shows it), `secret`
is 32 random bytes in URL-safe base64 without padding (43 characters). Redis keeps one hash, `ldp:api:tokens`,
field `<id>` -> JSON {"sha256": hex SHA-256 of the secret's text, "scopes": [...], "name": ..., "created_ms": ...,
"expires_ms": ms or null, "revoked_ms": ms or null}. Never the secret: whoever reads Redis (or a backup of it)
still cannot call the API. The secret has 256 random bits, so nothing is left to guess and one unsalted SHA-256
suffices (password stretching defends guessable secrets).

Scopes: `read` (collections and estimates), `metrics` (the Prometheus scrape), `admin` (every scope).

Checking a presented token (`TokenVerifier.verify`; the API's only Redis access for it is one read, HGET):
1. parse `Bearer ldp_<id>_<secret>` (the scheme's case is free); anything else is an invalid token, and no input
   makes the parse raise anything but `TokenError`;
2. the record of `<id>`: from a per-process cache if it was read less than `max_age_s` ago, else from Redis;
3. the SHA-256 of the secret compared with the record's in constant time (`hmac.compare_digest`);
4. not revoked, not expired (against the clock on every request: the verdict is never cached).
A malformed token, an unknown id and a wrong secret get the same answer ("invalid token"); only the holder of the
whole token learns that it expired or was revoked. Revoking takes effect within `max_age_s` (the cache's bound).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, cast

from ldpstream.contract.clock import now_ms

if TYPE_CHECKING:  # the stores are handed their clients: `ldp tokens` and the scopes load no Redis client
    import redis.client
    import redis.cluster

    from ldpstream.runtime.redis import AsyncRedis, SyncRedis

TOKENS_KEY = "ldp:api:tokens"
MAX_AGE_S = 2.0
TOKEN_ID = re.compile(r"[0-9a-f]{12}")
_BEARER = re.compile(r"(?i:bearer) +ldp_([0-9a-f]{12})_([A-Za-z0-9_-]{43})", re.ASCII)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TTL = re.compile(r"([0-9]{1,6})([smhd])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

INVALID = "invalid token"
EXPIRED = "token expired"
REVOKED = "token revoked"


class Scope(StrEnum):
    """What a token may do; `admin` implies every scope."""

    READ = "read"
    METRICS = "metrics"
    ADMIN = "admin"


class TokenError(Exception):
    """A presented token that does not verify; the message says why, in words safe to send back."""


@dataclass(frozen=True)
class TokenRecord:
    """What Redis keeps of a token: the hash of its secret, never the secret."""

    id: str
    sha256: str
    scopes: frozenset[Scope]
    name: str
    created_ms: int
    expires_ms: int | None = None
    revoked_ms: int | None = None

    def allows(self, scope: Scope) -> bool:
        """Whether the token has `scope` (or `admin`)."""
        return scope in self.scopes or Scope.ADMIN in self.scopes

    def status(self, at_ms: int) -> str:
        """'revoked', 'expired' or 'active' at `at_ms`."""
        if self.revoked_ms is not None:
            return "revoked"
        if self.expires_ms is not None and at_ms >= self.expires_ms:
            return "expired"
        return "active"

    def to_json(self) -> str:
        """The record as stored (the id is the hash field, not part of the value)."""
        return json.dumps({"sha256": self.sha256, "scopes": sorted(self.scopes), "name": self.name,
                           "created_ms": self.created_ms, "expires_ms": self.expires_ms,
                           "revoked_ms": self.revoked_ms})

    @classmethod
    def from_json(cls, token_id: str, raw: bytes | str) -> TokenRecord:
        """The record stored under `token_id`; ValueError unless `raw` is one, every field of its type."""
        try:
            entry = json.loads(raw)
            sha256, scopes, name = entry["sha256"], entry["scopes"], entry["name"]
            times = entry["created_ms"], entry["expires_ms"], entry["revoked_ms"]
            if not (isinstance(sha256, str) and _SHA256.fullmatch(sha256) and isinstance(scopes, list)
                    and isinstance(name, str) and _is_ms(times[0])
                    and all(t is None or _is_ms(t) for t in times[1:])):
                raise TypeError
            return cls(token_id, sha256, frozenset(Scope(s) for s in scopes), name, *times)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"malformed record of token {token_id}") from exc


def _is_ms(value: object) -> bool:
    """Whether a JSON value is a time in epoch milliseconds (an int, not a bool, >= 0)."""
    return type(value) is int and value >= 0


@dataclass(frozen=True)
class Issued:
    """A new token: the string to hand over (shown once) and the record to store."""

    token: str
    record: TokenRecord


def digest(secret: str) -> str:
    """The hex SHA-256 of a secret's text, as stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token(scopes: Iterable[Scope], name: str, created_ms: int, ttl_ms: int | None) -> Issued:
    """A fresh random token with its record (expiring `ttl_ms` after `created_ms`; None: never)."""
    scopes = frozenset(scopes)
    if not scopes:
        raise ValueError("a token needs at least one scope")
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = TokenRecord(token_id, digest(secret), scopes, name, created_ms,
                         None if ttl_ms is None else created_ms + ttl_ms)
    return Issued(f"ldp_{token_id}_{secret}", record)


def parse_bearer(header: str) -> tuple[str, str] | None:
    """(id, secret) of an Authorization header value `Bearer ldp_<id>_<secret>`; None for anything else.

    Examples
    --------
    >>> parse_bearer("Bearer ldp_0123456789ab_" + "A" * 43)
    ('0123456789ab', 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')
    >>> parse_bearer("Bearer ldp_0123456789ab_" + "A" * 42) is None, parse_bearer("Basic Zm9vOmJhcg==") is None
    (True, True)
    """
    match = _BEARER.fullmatch(header)
    return None if match is None else (match.group(1), match.group(2))


def parse_ttl(text: str) -> int | None:
    """Milliseconds of a lifetime written as <n>s, <n>m, <n>h or <n>d (n >= 1), or None for 'none' (never
    expires); ValueError for anything else.

    Examples
    --------
    >>> parse_ttl("30d"), parse_ttl("12h"), parse_ttl("none")
    (2592000000, 43200000, None)
    """
    if text == "none":
        return None
    match = _TTL.fullmatch(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"a lifetime is <n>s, <n>m, <n>h or <n>d with n >= 1, or none; not {text[:40]!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def check(record: TokenRecord | None, secret: str, at_ms: int) -> TokenRecord:
    """The record if `secret` is its token's and it is active at `at_ms`; TokenError otherwise (the secret is
    compared first, so only its holder learns that a token expired or was revoked)."""
    if record is None or not hmac.compare_digest(digest(secret), record.sha256):
        raise TokenError(INVALID)
    status = record.status(at_ms)
    if status != "active":
        raise TokenError(REVOKED if status == "revoked" else EXPIRED)
    return record


class TokenStore:
    """The admin's side: issue, list and revoke tokens (writes Redis)."""

    def __init__(self, client: SyncRedis) -> None:
        self.redis = client

    def issue(self, scopes: Iterable[Scope], name: str, now: int, ttl_ms: int | None) -> Issued:
        """Make and store a new token; its string is in the answer and nowhere else."""
        while True:
            issued = new_token(scopes, name, now, ttl_ms)
            if self.redis.hsetnx(TOKENS_KEY, issued.record.id, issued.record.to_json()):
                return issued  # else the random id is taken (n stored tokens: n chances in 2^48): draw again

    def records(self) -> list[TokenRecord]:
        """Every token ever issued, oldest first; ValueError if a stored record is malformed."""
        stored = self.redis.hgetall(TOKENS_KEY)
        return sorted((TokenRecord.from_json(k.decode(errors="replace") if isinstance(k, bytes) else k, v)
                       for k, v in stored.items()), key=lambda r: (r.created_ms, r.id))

    def revoke(self, token_id: str, now: int) -> TokenRecord | None:
        """Revoke a token from `now` on (one already revoked keeps its time); its record, None if there is none."""
        if TOKEN_ID.fullmatch(token_id) is None:
            return None

        def revoke_in(pipe: redis.client.Pipeline | redis.cluster.ClusterPipeline) -> TokenRecord | None:
            raw = pipe.hget(TOKENS_KEY, token_id)
            if raw is None:
                return None
            record = TokenRecord.from_json(token_id, raw)
            if record.revoked_ms is not None:
                return record
            revoked = replace(record, revoked_ms=now)
            pipe.multi()
            pipe.hset(TOKENS_KEY, token_id, revoked.to_json())
            return revoked

        # redis-py types the callable of `transaction` as returning None, and its answer as the pipeline's replies;
        # with value_from_callable it returns what the callable returned
        answer = self.redis.transaction(revoke_in, TOKENS_KEY, value_from_callable=True)  # type: ignore[arg-type]
        return cast("TokenRecord | None", answer)


class TokenVerifier:
    """The API's side: verify presented tokens (reads Redis only: one HGET per token id per `max_age_s`).

    `clock` (epoch ms) decides expiry; `monotonic` (seconds) ages the cache; both are injectable for tests.
    The cache holds only records found in Redis, so it is never larger than the hash.
    """

    def __init__(self, client: AsyncRedis, max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], int] = now_ms, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.redis = client
        self.max_age_s = max_age_s
        self.clock = clock
        self.monotonic = monotonic
        self._cache: dict[str, tuple[float, TokenRecord]] = {}

    async def verify(self, header: str) -> TokenRecord:
        """The active record of the token in an Authorization header value; TokenError if it does not verify
        (RedisError if Redis does not answer)."""
        parsed = parse_bearer(header)
        if parsed is None:
            raise TokenError(INVALID)
        token_id, secret = parsed
        return check(await self._record(token_id), secret, self.clock())

    async def _record(self, token_id: str) -> TokenRecord | None:
        cached = self._cache.get(token_id)
        if cached is not None and self.monotonic() - cached[0] < self.max_age_s:
            return cached[1]
        read_at = self.monotonic()
        raw = await self.redis.hget(TOKENS_KEY, token_id)
        try:
            record = None if raw is None else TokenRecord.from_json(token_id, raw)
        except ValueError:
            record = None  # a malformed record verifies nothing
        if record is None:
            self._cache.pop(token_id, None)
        else:
            self._cache[token_id] = (read_at, record)
        return record

    async def close(self) -> None:
        """Close the Redis client."""
        await self.redis.aclose()

    async def refusal(self, presented: list[str], scope: Scope | None) -> Refused | None:
        """Why a request carrying these Authorization header values may not use a route needing `scope` (None:
        any valid token), or None if it may (RFC 6750: 401 without a token or with one that does not verify,
        403 without the scope). RedisError if Redis does not answer."""
        if not any(presented):
            return Refused(401, NO_TOKEN, REALM)
        try:  # two Authorization headers are one too many: "" verifies as an invalid token
            token = await self.verify(presented[0] if len(presented) == 1 else "")
        except TokenError as exc:
            return Refused(401, str(exc), f'{REALM}, error="invalid_token"')
        if scope is not None and not token.allows(scope):
            return Refused(403, f"this token lacks the scope {scope.value!r}",
                           f'{REALM}, error="insufficient_scope", scope="{scope.value}"')
        return None


REALM = 'Bearer realm="ldpstream"'
NO_TOKEN = "no token: send Authorization: Bearer <token> (an admin makes one with `ldp tokens create`)"


@dataclass(frozen=True)
class Refused:
    """A request a token does not allow: the HTTP status, the error for the body, the WWW-Authenticate value."""

    status: int
    error: str
    challenge: str
