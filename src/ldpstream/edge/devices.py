"""Enrolled devices and the per-request admission state, in Redis.

Redis holds, per collection, only whether each device id is enrolled (`ldp:edge:{NAME:SS}:devices`, id -> 1, or 0 once
revoked): a device's key is derived from the edge's master key (`ldpstream.contract.auth.device_key`, the generation its
id names: `ldpstream.edge.keyring`), so nothing in Redis lets anyone sign a request, and a signature verifies without a
lookup. Revoking a device makes every request it signs answer 401; a revoked id is never enrolled again (enrolment
issues new random ids).

Admission (`Admission.admit`, one Lua script call over the requests that arrived together on one server, one per
key group (below) on a Redis Cluster; each atomic) after the signature has verified and the reports passed their
checks:
1. the device is enrolled and not revoked;
2. the signature was not seen in the last 2 x the allowed clock skew (replay: `...:sig:<hex>`, with a TTL);
3. the device's request count in the current second is within its rate limit (`...:rate:<id>`, TTL 1 s);
4. per report, the device has not reported in its dedupe window (`...:seen:<version>:<start>:<id>`, TTL as long
   as the window admits reports: `ldpstream.contract.validation.mark_ttl_ms`, at least two windows): the script
   marks the windows of the reports it admits and returns the positions already used.
Marks of reports that are then not acknowledged are removed again (`release`), so the device can retry.

A collection's keys are spread over EDGE_SLOTS key groups by a hash of the device id (`device_slot`), each with
its own Redis Cluster hash tag `{NAME:SS}`: a request's keys lie in one slot (one script call per group), and one
collection's admission state is spread over up to EDGE_SLOTS shards. One shard is not enough for a large fleet:
each admitted request leaves 430-530 bytes of keys until their TTLs, and a shard core admits 49-56k requests/s
(`benchmarks/capacity.py`; README, capacity model). (Before the groups, a collection had one devices hash,
`ldp:edge:NAME:devices`: `upgrade_devices_hashes` moves such hashes' devices into the groups once.)
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import redis.asyncio.cluster
from redis.typing import EncodableT, FieldT

from ldpstream.contract.auth import MAX_SKEW_MS, Credential
from ldpstream.contract.spec import ALL_TIME, window_seconds
from ldpstream.contract.validation import DEFAULT_MAX_AGE_MS
from ldpstream.edge.keyring import Keyring, new_device_id
from ldpstream.runtime.redis import AsyncRedis, SyncRedis

ADMIT = """
local replay_ttl, rate, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for r = 1, n do
  local f = {}
  for field in string.gmatch(ARGV[3 + r], '%S+') do f[#f + 1] = field end
  local devices, device, ttl, version = KEYS[tonumber(f[1])], f[2], f[4], f[5]
  local prefix = string.sub(devices, 1, -9)
  if redis.call('HGET', devices, device) ~= '1' then out[r] = '-1'
  elseif not redis.call('SET', prefix .. ':sig:' .. f[3], '1', 'NX', 'PX', replay_ttl) then out[r] = '-2'
  else
    local counter = prefix .. ':rate:' .. device
    local count = redis.call('INCR', counter)
    if count == 1 then redis.call('PEXPIRE', counter, 1000) end
    if count > rate then out[r] = '-3'
    else
      local used = {}
      for i = 6, #f do
        if not redis.call('SET', prefix .. ':seen:' .. version .. ':' .. f[i] .. ':' .. device, '1', 'NX', 'PX', ttl)
        then used[#used + 1] = i - 6 end
      end
      out[r] = table.concat(used, ',')
    end
  end
end
return table.concat(out, ';')
"""  # KEYS: the devices hashes of the key groups present (`<prefix>:devices`); ARGV: replay TTL, rate, n, then per
# request one field list "group device signature mark-TTL version window-start...": its other keys are the group's
# prefix with ':sig:<signature>', ':rate:<device>' and ':seen:<version>:<start>:<device>' (`Admission.window_keys`),
# so they share its hash tag. Out: per request, ';'-separated, a code < 0, or the positions of the window starts
# already used (','-separated, empty if none).
REVOKED, REPLAYED, RATE_LIMITED = -1, -2, -3
EDGE_SLOTS = 16  # key groups per collection: fixed (a device's group is where it was enrolled)


def device_slot(device: str) -> int:
    """Which of a collection's EDGE_SLOTS key groups holds a device's state (a stable hash of its id).

    Examples
    --------
    >>> 0 <= device_slot("5f1c0de2a9b3c4d5e6f70812") < EDGE_SLOTS
    True
    """
    return zlib.crc32(device.encode()) % EDGE_SLOTS


def _prefix(collection: str, slot: int) -> str:
    """The key prefix of one of a collection's key groups, with its Redis Cluster hash tag."""
    return f"ldp:edge:{{{collection}:{slot:02d}}}"


def devices_key(collection: str, device: str) -> str:
    """The hash of enrolled devices that holds `device`."""
    return f"{_prefix(collection, device_slot(device))}:devices"


def devices_keys(collection: str) -> list[str]:
    """Every enrolled-devices hash of a collection."""
    return [f"{_prefix(collection, slot)}:devices" for slot in range(EDGE_SLOTS)]


def edge_keys(collection: str) -> str:
    """A SCAN pattern matching every edge key of a collection."""
    return f"ldp:edge:{{{collection}:[0-9][0-9]}}:*"


def upgrade_devices_hashes(client: SyncRedis) -> list[str]:
    """Move the enrolled devices of an earlier version's hashes (`ldp:edge:NAME:devices`, one per collection, no
    hash tag) into their key groups' hashes, and delete the old ones; the collections moved. (One server: a cluster
    never held the old keys.)"""
    moved = []
    for raw in client.scan_iter(match="ldp:edge:*:devices", count=1000):
        key = raw.decode()
        name = key[len("ldp:edge:"):-len(":devices")]
        if name.startswith("{"):
            continue
        for fields in _chunks(client.hscan_iter(key, count=10_000), 10_000):
            groups: dict[str, dict[FieldT, EncodableT]] = {}  # redis-py's types (a Mapping's keys are invariant)
            for device, flag in fields:
                groups.setdefault(devices_key(name, device.decode()), {})[device] = flag
            for target, mapping in groups.items():
                client.hset(target, mapping=mapping)
        client.delete(key)
        moved.append(name)
    return moved


def _chunks(items: Iterator[tuple[bytes, bytes]], size: int) -> Iterator[list[tuple[bytes, bytes]]]:
    chunk: list[tuple[bytes, bytes]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class DeviceRegistry:
    """Enrol and revoke devices."""

    def __init__(self, client: SyncRedis, keyring: Keyring) -> None:
        self.redis = client
        self.keyring = keyring

    def enroll(self, collection: str, count: int) -> list[Credential]:
        """Enrol `count` new devices (random ids, the current master-key generation) and return their credentials."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        ids = [new_device_id(self.keyring.current) for _ in range(count)]
        for lo in range(0, count, 10_000):
            groups: dict[str, dict[FieldT, EncodableT]] = {}
            for d in ids[lo:lo + 10_000]:
                groups.setdefault(devices_key(collection, d), {})[d] = 1
            for key, mapping in groups.items():
                self.redis.hset(key, mapping=mapping)
        return [Credential(collection, d, self.keyring.device_key(collection, d)) for d in ids]

    def revoke(self, collection: str, devices: Sequence[str]) -> int:
        """Revoke devices (their requests answer 401 from now on); the number that were enrolled."""
        found = 0
        for device in devices:
            key = devices_key(collection, device)
            if self.redis.hget(key, device) == b"1":
                self.redis.hset(key, device, 0)
                found += 1
        return found


@dataclass(frozen=True)
class Admit:
    """One request to admit: its collection, device, signature, dedupe window, and the spec version and window
    starts of its reports when the device may report once per window (else none)."""

    collection: str
    device: str
    signature: str
    window: str
    version: int = 0
    starts: tuple[int, ...] = ()
    ttl_ms: int = 0  # how long its window marks live (`ldpstream.contract.validation.mark_ttl_ms`; 0: two windows)

    @property
    def marks(self) -> list[str]:
        """The keys marking its reports' windows (`Admission.window_keys`)."""
        return Admission.window_keys(self.collection, self.version, self.device, self.starts)


class Admission:
    """The edge's per-request state (asyncio): device keys, and the replay, rate and once-per-window checks of
    `ADMIT` (see the module docstring)."""

    def __init__(self, client: AsyncRedis, keyring: Keyring, rate_per_s: int) -> None:
        self.redis = client
        self.keyring = keyring
        self.rate_per_s = rate_per_s
        self._script = client.register_script(ADMIT)
        self._clustered = isinstance(client, redis.asyncio.cluster.RedisCluster)  # a Protocol check: ~0.1 ms, once

    def key_of(self, collection: str, device: str) -> bytes:
        """The key a device's requests must be signed with (whether it is enrolled is `admit`'s question);
        AuthError if its master-key generation is retired."""
        return self.keyring.device_key(collection, device)

    @staticmethod
    def window_keys(collection: str, version: int, device: str, starts: Sequence[int] | np.ndarray) -> list[str]:
        """The Redis keys marking the device's reports in their dedupe windows."""
        prefix = _prefix(collection, device_slot(device))
        return [f"{prefix}:seen:{version}:{start}:{device}" for start in np.asarray(starts, dtype=np.int64).tolist()]

    async def admit(self, requests: Sequence[Admit]) -> list[list[int] | int]:
        """Per request: the positions (in its `marks`) of reports whose window the device already used, or REVOKED
        (not enrolled, or revoked), REPLAYED or RATE_LIMITED (then nothing was marked). One script call for them
        all on one server; on a Redis Cluster one per key group present (a call's keys must share a slot)."""
        by_group: dict[tuple[str, int] | None, list[int]] = {}
        for i, r in enumerate(requests):
            by_group.setdefault((r.collection, device_slot(r.device)) if self._clustered else None, []).append(i)
        calls: list[tuple[list[str], list[int | str]]] = []
        for members in by_group.values():
            groups: dict[str, int] = {}  # devices hash -> its 1-based place in KEYS
            fields = []
            for i in members:
                r = requests[i]
                group = groups.setdefault(devices_key(r.collection, r.device), len(groups) + 1)
                ttl = r.ttl_ms or 2 * (window_seconds(r.window) * 1000 if r.window != ALL_TIME else DEFAULT_MAX_AGE_MS)
                fields.append(" ".join(map(str, (group, r.device, r.signature, ttl, r.version, *r.starts))))
            calls.append((list(groups), [2 * MAX_SKEW_MS, self.rate_per_s, len(members), *fields]))
        answers: list[list[int] | int] = [0] * len(requests)
        for members, out in zip(by_group.values(), await self._run(calls), strict=True):
            text = out.decode() if isinstance(out, bytes) else str(out)
            for i, entry in zip(members, text.split(";"), strict=True):
                answers[i] = int(entry) if entry.startswith("-") else [int(u) for u in entry.split(",") if u]
        return answers

    async def _run(self, calls: list[tuple[list[str], list[int | str]]]) -> list[bytes]:
        """The script's answers to `calls`, one after the other (EVALSHA; a server that lost the script gets it
        loaded and the call again: nothing of it ran). On a Redis Cluster each goes to its slot's node (redis-py
        8.1's asyncio cluster client, given the calls at once, broke connections it was still opening: 'NoneType'
        object has no attribute 'writelines', tested); on one server there is one call per turn."""
        return [await self._script(keys=keys, args=args) for keys, args in calls]

    async def release(self, marks: Sequence[str]) -> None:
        """Forget window marks of reports that were not acknowledged (the device will send them again)."""
        if marks:
            await self.redis.delete(*marks)
