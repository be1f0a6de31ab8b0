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
  has uses left. Redis counts a token's uses (an atomic script on the token's key: uses never go over, under any
  concurrency) and keeps the count after the token expires, as the record of how many devices a token enrolled; it
  never stores which device ids a token produced. Rate limits: per client address per minute and per token per
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
from ldpstream.runtime.redis import AsyncRedis
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
# ADDRESS: KEYS 1 the address's requests this minute; ARGV 1 the limit. Out: 0 allowed, -3 over the limit.
ADDRESS = """
if redis.call('INCR', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], 120000) end
if tonumber(redis.call('GET', KEYS[1])) > tonumber(ARGV[1]) then return -3 end
return 0
"""
# TOKEN: KEYS 1 the token's use count, 2 its requests this second; ARGV 1 its uses, 2 when the count expires (ms),
# 3 the per-second limit. Out: the count after this use, -1 used up, -2 rate limited (nothing counted then).
TOKEN = """
if redis.call('INCR', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], 2000) end
if tonumber(redis.call('GET', KEYS[2])) > tonumber(ARGV[3]) then return -2 end
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return -1 end
redis.call('INCR', KEYS[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return n + 1
"""
# ENROL: KEYS 1-2 TOKEN's, 3 ADDRESS's, 4 the devices hash of the new device; ARGV 1-3 TOKEN's, 4 ADDRESS's limit,
# 5 the device id. Out: as TOKEN's, or -3.
ENROL = """
if redis.call('INCR', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], 120000) end
if tonumber(redis.call('GET', KEYS[3])) > tonumber(ARGV[4]) then return -3 end
""" + TOKEN.replace("return n + 1", "redis.call('HSET', KEYS[4], ARGV[5], 1)\nreturn n + 1")


def uses_key(token_id: str) -> str:
    """The Redis key of a token's use count (its hash tag keeps its keys in one slot)."""
    return f"ldp:edge:enrol:{{tok:{token_id}}}:uses"


@dataclass(frozen=True)
class EnrolLimits:
    """Enrolments allowed per client address per minute and per token per second."""

    per_address_per_minute: int = 300
    per_token_per_second: int = 2000


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
        address_key = f"ldp:edge:enrol:addr:{{{address}}}:{now_ms // 60_000}"
        address_limit = self.limits.per_address_per_minute
        if token is None or self._clustered:  # the address is counted first, whatever the token
            if int(await self._address(keys=[address_key], args=[address_limit])) < 0:
                raise Refusal(429, RATE_LIMITED, f"more than {address_limit} enrolments a minute from this address")
            if token is None:
                raise refusal
        device = new_device_id(self.keyring.current)
        token_keys = [uses_key(token.id), f"ldp:edge:enrol:{{tok:{token.id}}}:s:{now_ms // 1000}"]
        token_args = [token.uses, token.expires_ms + TOKEN_RECORD_MS, self.limits.per_token_per_second]
        if self._clustered:
            used = int(await self._token(keys=token_keys, args=token_args))
        else:
            used = int(await self._enrol(keys=[*token_keys, address_key, devices_key(collection, device)],
                                         args=[*token_args, address_limit, device]))
        if used == -3:
            raise Refusal(429, RATE_LIMITED, f"more than {address_limit} enrolments a minute from this address")
        if used == -2:
            raise Refusal(429, RATE_LIMITED, f"more than {self.limits.per_token_per_second} enrolments a second "
                                             f"with this token")
        if used == -1:
            raise Refusal(403, USED_UP, f"the enrolment token has been used {token.uses} times, all it allows")
        if self._clustered:
            try:
                await self.redis.hset(devices_key(collection, device), device, 1)
            except BaseException:
                await self.redis.decr(uses_key(token.id))  # the use was not spent on a device
                raise
        return Credential(collection, device, self.keyring.device_key(collection, device))

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
