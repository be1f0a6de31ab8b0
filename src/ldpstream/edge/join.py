"""The edge's side of the device join protocol: signed pointers and specs for devices to verify, enrolment with a
token, and a device deleting itself (`ldpstream.device.sdk.Device.join` is the other side).

- `GET /v1/collections/NAME`: the pointer to the newest published version (`ldpstream.contract.pointer`), signed with
  the edge's online pointer key; the same bytes in every edge process for a period, with an ETag, so `If-None-Match`
  answers 304.
- `GET /v1/collections/NAME/specs/VERSION`: the spec's exact bytes as the admin signed them, the signature block in
  `LDP-Signature`, `ETag` the sha256 of the bytes; versions are immutable, so they may be cached forever.
- `GET /v1/strategies/HASH`: a factorization strategy a published spec pins (devices check it against the hash).
- `POST /v1/enroll` {"token", "collection"}: a device credential of the usual kind (`ldpstream.contract.auth`), if
  the token (`ldpstream.contract.enrolment`) is signed by a trusted token key, unexpired, names the collection and
  has uses left and is not revoked. Redis counts a token's uses (an atomic script on the token's key: uses never go
  over, under any concurrency) and keeps the count after the token expires, as the record of how many devices a
  token enrolled (`token_usage`, `ldp devices tokens`); it never stores which device ids a token produced. An operator
  revokes a token (`revoke_token`, `ldp devices revoke-token`) whose devices are suspected of poisoning: further
  enrolments with it are 403. Rate limits: per client address per minute and (optionally) per day, and per token per
  second (429 with Retry-After).
- `DELETE /v1/collections/NAME/devices/ID`, signed with the device's credential: its enrolment is revoked (204).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio.cluster
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ldpstream.contract.auth import AuthError, Credential, parse_authorization, verify
from ldpstream.contract.enrolment import EnrolmentToken, TokenError, usable, verified_token
from ldpstream.contract.pointer import POINTER_PERIOD_MS, Pointer, issue
from ldpstream.contract.signatures import KeysById, pointer_message, sign_block
from ldpstream.edge.devices import devices_key
from ldpstream.edge.intake import MALFORMED, RATE_LIMITED, TOO_LARGE, UNAUTHORIZED, WRONG_DEVICE, Refusal
from ldpstream.edge.keyring import Keyring, new_device_id
from ldpstream.edge.plans import EdgePlan, EdgePlans
from ldpstream.runtime.redis import AsyncRedis, SyncRedis
from ldpstream.runtime.strategies import strategy_path

MAX_ENROL_BODY = 8 * 2**10
REDIS_IN_FLIGHT = 32  # enrolments talking to Redis at once (the rest wait their turn, not a connection each)
TOKEN_RECORD_MS = 30 * 86_400_000  # a token's use count is kept this long after it expires (operators' record)
BAD_TOKEN = "bad_token"
USED_UP = "token_used_up"
UNAVAILABLE = "enrolment_unavailable"
_HASH = re.compile(r"[0-9a-f]{64}")

# The three steps of an enrolment in Redis. On one server they run as one script (ENROL: one round trip); on a Redis
# Cluster their keys lie in different slots, so one call each.
# ADDRESS: KEYS 1 the address's requests this minute, 2 this day; ARGV 1 the minute's limit, 2 the day's (0: none).
# Out: 0 allowed, -3 over the minute's limit, -4 over the day's.
_ADDRESS = """
if redis.call('INCR', KEYS[{minute}]) == 1 then redis.call('PEXPIRE', KEYS[{minute}], 120000) end
if tonumber(redis.call('GET', KEYS[{minute}])) > tonumber(ARGV[{minute_limit}]) then return -3 end
if tonumber(ARGV[{day_limit}]) > 0 then
  if redis.call('INCR', KEYS[{day}]) == 1 then redis.call('PEXPIRE', KEYS[{day}], 172800000) end
  if tonumber(redis.call('GET', KEYS[{day}])) > tonumber(ARGV[{day_limit}]) then return -4 end
end
"""
# TOKEN: KEYS 1 the token's use count, 2 its requests this second, 3 its revocation mark; ARGV 1 its uses, 2 when the
# count expires (ms), 3 the per-second limit. Out: the count after this use, -1 used up, -2 rate limited, -5 revoked
# (nothing counted then).
_TOKEN = """
if redis.call('EXISTS', KEYS[{revoked}]) == 1 then return -5 end
if redis.call('INCR', KEYS[{second}]) == 1 then redis.call('PEXPIRE', KEYS[{second}], 2000) end
if tonumber(redis.call('GET', KEYS[{second}])) > tonumber(ARGV[{second_limit}]) then return -2 end
local n = tonumber(redis.call('GET', KEYS[{uses}]) or '0')
if n >= tonumber(ARGV[{allowed}]) then return -1 end
redis.call('INCR', KEYS[{uses}])
redis.call('PEXPIREAT', KEYS[{uses}], ARGV[{expires}])
"""
ADDRESS = _ADDRESS.format(minute=1, day=2, minute_limit=1, day_limit=2) + "return 0\n"
TOKEN = _TOKEN.format(uses=1, second=2, revoked=3, allowed=1, expires=2, second_limit=3) + "return n + 1\n"
# ENROL: KEYS 1-3 TOKEN's, 4-5 ADDRESS's, 6 the devices hash of the new device; ARGV 1-3 TOKEN's, 4-5 ADDRESS's, 6 the
# device id. Out: as TOKEN's, or -3, -4.
ENROL = (_ADDRESS.format(minute=4, day=5, minute_limit=4, day_limit=5)
         + _TOKEN.format(uses=1, second=2, revoked=3, allowed=1, expires=2, second_limit=3)
         + "redis.call('HSET', KEYS[6], ARGV[6], 1)\nreturn n + 1\n")
REVOKED_TOKEN = "token_revoked"
TOKEN_REVOCATION_MS = 400 * 86_400_000  # a revoked token's mark outlives any token's lifetime of use


def uses_key(token_id: str) -> str:
    """The Redis key of a token's use count (its hash tag keeps its keys in one slot)."""
    return f"ldp:edge:enrol:{{tok:{token_id}}}:uses"


def revoked_key(token_id: str) -> str:
    """The Redis key marking a token revoked (same slot as its count)."""
    return f"ldp:edge:enrol:{{tok:{token_id}}}:revoked"


def address_keys(address: str, now_ms: int) -> list[str]:
    """The keys counting an address's enrolments this minute and this day (one slot: the address's hash tag)."""
    return [f"ldp:edge:enrol:addr:{{{address}}}:{now_ms // 60_000}",
            f"ldp:edge:enrol:addr:{{{address}}}:d{now_ms // 86_400_000}"]


@dataclass(frozen=True)
class EnrolLimits:
    """Enrolments allowed per client address per minute and per day (0: no daily cap), and per token per second."""

    per_address_per_minute: int = 300
    per_token_per_second: int = 2000
    per_address_per_day: int = 0


@dataclass(frozen=True)
class SignedPointer:
    """A pointer as served: its bytes, signature block and ETag."""

    pointer: Pointer
    body: bytes
    block: bytes
    etag: str


TOKENS_KEPT = 4096  # verified enrolment tokens kept in memory (`Join._verified`)


class Join:
    """The join endpoints' logic, apart from HTTP (module docstring). A missing pointer key or token keys turn the
    endpoints that need them into 503 refusals, not a failed start."""

    def __init__(self, plans: EdgePlans, client: AsyncRedis, keyring: Keyring, pointer_key: Ed25519PrivateKey | None,
                 token_keys: KeysById | None, limits: EnrolLimits = EnrolLimits()) -> None:
        self.plans = plans
        self.redis = client
        self.keyring = keyring
        self.pointer_key = pointer_key
        self.token_keys = token_keys
        self.limits = limits
        self._in_redis = asyncio.Semaphore(REDIS_IN_FLIGHT)
        self._clustered = isinstance(client, redis.asyncio.cluster.RedisCluster)
        self._enrol = client.register_script(ENROL)
        self._address = client.register_script(ADDRESS)
        self._token = client.register_script(TOKEN)
        self._pointers: dict[str, SignedPointer] = {}
        # tokens whose signature checked out, by their exact text: one token enrols a whole fleet, and its Ed25519
        # check was a fifth of an enrolment's CPU (py-spy during benchmarks/bench_join.py); bounded, oldest out
        self._tokens: dict[str, EnrolmentToken] = {}

    def _verified(self, text: str) -> EnrolmentToken:
        """The token in `text`, its signature checked once per distinct text (`verified_token`); TokenError."""
        token = self._tokens.get(text)
        if token is None:
            token = verified_token(text, self.token_keys or {})
            if len(self._tokens) >= TOKENS_KEPT:
                del self._tokens[next(iter(self._tokens))]
            self._tokens[text] = token
        return token

    def pointer(self, name: str, now_ms: int) -> SignedPointer | None:
        """The signed pointer to the collection's newest version (None: not published); Refusal(503) without a
        pointer key. Signed once per version and period, then served from memory."""
        plan = self.plans.newest(name)
        if plan is None:
            return None
        if self.pointer_key is None:
            raise Refusal(503, UNAVAILABLE, "this edge has no pointer-signing key (`ldp up` makes it)")
        sequence = now_ms // POINTER_PERIOD_MS
        cached = self._pointers.get(name)
        if cached is not None and cached.pointer.sequence == sequence and cached.pointer.version == plan.spec.version:
            return cached
        pointer = issue(name, plan.spec.version, hashlib.sha256(plan.signed).hexdigest(), now_ms)
        body = pointer.to_bytes()
        signed = SignedPointer(pointer, body, sign_block(self.pointer_key, pointer_message(body)),
                               f'"{hashlib.sha256(body).hexdigest()}"')
        self._pointers[name] = signed
        return signed

    def spec(self, name: str, version: int) -> EdgePlan | None:
        """The published spec version (its signed bytes), None if it is not known here."""
        plan = self.plans.cached(name, version)
        return plan if plan is not None and plan.signed else None

    def strategy(self, content_hash: str) -> bytes | None:
        """The .npz bytes of a strategy a published spec pins, None otherwise."""
        if not _HASH.fullmatch(content_hash):
            return None
        pinned = any(getattr(a, "strategy", None) == content_hash for plan in self.plans.all()
                     for a in plan.spec.attributes)
        if not pinned:
            return None
        path = strategy_path(content_hash)  # the local cache the plan's load filled
        return path.read_bytes() if path.exists() else None

    async def enroll(self, body: bytes, address: str, now_ms: int) -> Credential:
        """A new device's credential for the token and collection in `body`; Refusal otherwise (nothing counted
        or enrolled when refused)."""
        if len(body) > MAX_ENROL_BODY:
            raise Refusal(413, TOO_LARGE, f"an enrolment is at most {MAX_ENROL_BODY} bytes")
        text, collection = _enrolment(body)
        if self.token_keys is None:
            raise Refusal(503, UNAVAILABLE, "this edge trusts no enrolment-token key (`ldp up` makes one)")
        async with self._in_redis:
            return await self._enroll(text, collection, address, now_ms)

    async def _enroll(self, text: str, collection: str, address: str, now_ms: int) -> Credential:
        try:
            token = usable(self._verified(text), collection, now_ms)
        except TokenError as exc:
            token, refusal = None, Refusal(403, BAD_TOKEN, str(exc))
        counters = address_keys(address, now_ms)
        address_args = [self.limits.per_address_per_minute, self.limits.per_address_per_day]
        if token is None or self._clustered:  # the address is counted first, whatever the token
            self._refuse(int(await self._address(keys=counters, args=address_args)), token)
            if token is None:
                raise refusal
        device = new_device_id(self.keyring.current)
        token_keys = [uses_key(token.id), f"ldp:edge:enrol:{{tok:{token.id}}}:s:{now_ms // 1000}",
                      revoked_key(token.id)]
        token_args = [token.uses, token.expires_ms + TOKEN_RECORD_MS, self.limits.per_token_per_second]
        if self._clustered:
            used = int(await self._token(keys=token_keys, args=token_args))
        else:
            used = int(await self._enrol(keys=[*token_keys, *counters, devices_key(collection, device)],
                                         args=[*token_args, *address_args, device]))
        self._refuse(used, token)
        if self._clustered:
            try:
                await self.redis.hset(devices_key(collection, device), device, 1)
            except BaseException:
                await self.redis.decr(uses_key(token.id))  # the use was not spent on a device
                raise
        return Credential(collection, device, self.keyring.device_key(collection, device))

    def _refuse(self, answer: int, token: Any) -> None:
        """Refusal for a script's negative answer (module docstring; nothing was counted or enrolled then)."""
        limits = self.limits
        if answer == -3:
            raise Refusal(429, RATE_LIMITED, f"more than {limits.per_address_per_minute} enrolments a minute from "
                                             f"this address")
        if answer == -4:
            raise Refusal(429, RATE_LIMITED, f"more than {limits.per_address_per_day} enrolments a day from this "
                                             f"address")
        if answer == -2:
            raise Refusal(429, RATE_LIMITED, f"more than {limits.per_token_per_second} enrolments a second with this "
                                             f"token")
        if answer == -1:
            raise Refusal(403, USED_UP, f"the enrolment token has been used {token.uses} times, all it allows")
        if answer == -5:
            raise Refusal(403, REVOKED_TOKEN, "the enrolment token was revoked")

    async def leave(self, name: str, device: str, authorization: str | None, path: str, now_ms: int) -> None:
        """Revoke the device, if the request is signed with its own credential; Refusal otherwise."""
        try:
            signed = parse_authorization(authorization)
            verify(self.keyring.device_key(name, signed.device), signed, "DELETE", path, b"", now_ms)
        except AuthError as exc:
            raise Refusal(401, UNAUTHORIZED, str(exc)) from None
        if signed.device != device:
            raise Refusal(403, WRONG_DEVICE, "a device may delete only itself")
        await self.redis.hset(devices_key(name, device), device, 0)


@dataclass(frozen=True)
class TokenUsage:
    """The record of one enrolment token: how many devices it enrolled (never which), whether it is revoked, and
    how long the record is kept (seconds; None: no expiry set)."""

    token: str
    enrolled: int
    revoked: bool
    kept_s: int | None


_USES = re.compile(r"ldp:edge:enrol:\{tok:([0-9a-f]{32})\}:uses")


def token_usage(client: SyncRedis) -> list[TokenUsage]:
    """Every enrolment token the edge has counted, most devices first (an operator's view: a token whose devices
    are suspected of poisoning, `ldp poisoning status`, can then be revoked)."""
    found = []
    for raw in client.scan_iter(match="ldp:edge:enrol:{tok:*}:uses", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        match = _USES.fullmatch(key)
        if match is None:
            continue
        token = match.group(1)
        count, ttl_ms, revoked = client.get(key), client.pttl(key), client.exists(revoked_key(token))
        found.append(TokenUsage(token, int(count or 0), bool(revoked), int(ttl_ms) // 1000 if int(ttl_ms) > 0
                                else None))
    return sorted(found, key=lambda u: (-u.enrolled, u.token))


def revoke_token(client: SyncRedis, token_id: str) -> bool:
    """Refuse every further enrolment with the token (403 token_revoked; the devices it enrolled keep their
    credentials: revoke those with `ldp devices revoke`); False if it was revoked already."""
    if not re.fullmatch(r"[0-9a-f]{32}", token_id):
        raise ValueError(f"a token id is 32 hex digits, got {token_id!r}")
    return bool(client.set(revoked_key(token_id), 1, nx=True, px=TOKEN_REVOCATION_MS))


def _enrolment(body: bytes) -> tuple[str, str]:
    """The token and collection of an enrolment body (JSON); Refusal(400) otherwise."""
    try:
        value: Any = json.loads(body)
    except (ValueError, RecursionError):
        raise Refusal(400, MALFORMED, "an enrolment is JSON {\"token\", \"collection\"}") from None
    if (not isinstance(value, Mapping) or set(value) != {"token", "collection"}
            or not isinstance(value["token"], str) or not isinstance(value["collection"], str)):
        raise Refusal(400, MALFORMED, "an enrolment is JSON {\"token\": TEXT, \"collection\": NAME}")
    return value["token"], value["collection"]
