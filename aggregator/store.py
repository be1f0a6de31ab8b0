"""The statistics store: additive per-window statistics, guarded by the last applied offset of each partition.

One contract, two backends (`RedisStore`, `MemoryStore`), run through the same tests. `apply(update)` is the
only write, and it is atomic (one Lua script in Redis):

1. If, for every partition the batch read, its last offset is <= the offset already applied there, nothing is
   written: the batch is a replay (after a crash or a rebalance) and is `skipped`. If for some partition its first
   offset is, nothing is written either (`overlap`): the caller drops the messages already applied and tries again.
2. If any device of the batch has already reported in its dedupe window, nothing is written and those devices
   are returned (`duplicates`); the caller moves them to the dead-letter topic and applies the rest.
3. Otherwise, in one step: the devices join their dedupe sets, the statistics increments are added, the outcome
   counters are added, the window index and freshness are updated, and the partition's offset is recorded.

What happens if the worker dies: before the script runs, nothing of the batch is in the store and the partition
resumes (seek) after the recorded offset, so the batch is read and applied again; after it ran, the batch is all
in the store and its replay is skipped at step 1. Kafka's committed offset is never trusted for this.

Keys share one hash tag per collection (`ldp:{NAME}:...`) so one script touches one Redis Cluster slot.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import redis

ALL_TIME = "all"


@dataclass(frozen=True)
class WindowIncrement:
    """What one batch adds to one window of one collection version."""

    version: int
    window: str
    start_ms: int
    devices: int
    stats: dict[int, np.ndarray]
    dedupe: np.ndarray | None = None  # uint64 devices that must not have reported in this window before
    dedupe_ttl_s: int = 0


@dataclass(frozen=True)
class OffsetRange:
    """The offsets a micro-batch read from one partition."""

    source: str  # "topic:partition"
    first: int
    last: int


@dataclass(frozen=True)
class BatchUpdate:
    """Everything one micro-batch adds to the store: from one or several partitions of one collection's topic."""

    collection: str
    ranges: tuple[OffsetRange, ...]
    windows: tuple[WindowIncrement, ...]
    outcomes: dict[str, int]
    newest_report_ms: int | None = None


@dataclass(frozen=True)
class ApplyResult:
    """`applied`, or why nothing was written: `skipped` (every range applied before), `overlap` (some range partly or
    wholly applied: `applied` has those sources' applied offsets), `duplicates` (devices already counted)."""

    status: str
    duplicates: dict[tuple[int, str, int], np.ndarray] = field(default_factory=dict)  # (version, window, start)
    applied: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowStats:
    """The statistics of one window: devices counted and, per attribute, its statistics vector."""

    devices: float
    stats: dict[int, np.ndarray]


class StatsStore(ABC):
    """The contract both backends implement."""

    @abstractmethod
    def apply(self, update: BatchUpdate) -> ApplyResult:
        """Apply a batch atomically unless it is a replay or holds devices already seen in their window."""

    @abstractmethod
    def read_window(self, collection: str, version: int, window: str, start_ms: int,
                    sizes: dict[int, int]) -> WindowStats:
        """The statistics of a window (`sizes`: statistics length per attribute index)."""

    @abstractmethod
    def windows(self, collection: str) -> list[tuple[int, str, int]]:
        """(version, window, start_ms) of every window with data, oldest first."""

    @abstractmethod
    def offsets(self, collection: str) -> dict[str, int]:
        """Last applied offset per "topic:partition"."""

    @abstractmethod
    def outcomes(self, collection: str) -> dict[str, int]:
        """Counters of reports by outcome ("accepted", "rejected:<reason>")."""

    @abstractmethod
    def freshness(self, collection: str) -> dict[str, int]:
        """{"newest_report_ms": .., "applied_ms": ..} of the last applied batch (empty if none)."""


def prefix(collection: str) -> str:
    """The key prefix of a collection, with its Redis Cluster hash tag."""
    return f"ldp:{{{collection}}}"


def window_member(version: int, window: str, start_ms: int) -> str:
    return f"v{version}:{window}:{start_ms}"


def parse_window_member(member: str) -> tuple[int, str, int]:
    v, window, start = member.split(":")
    return int(v[1:]), window, int(start)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------------------------------------
# Redis
# KEYS: 1 offsets, 2 outcomes, 3 windows index, 4 meta, then nd dedupe sets, then ns stats hashes.
# ARGV: 1 r, then r (source, first offset, last offset) triples; then nd, ns, newest report ms (or ''), now ms; then
#       per dedupe set: ttl, m, the m members packed as 8-byte strings in one argument; per stats hash: window
#       member, f, f (field, increment) pairs; then c, c (outcome, n) pairs.
APPLY_SCRIPT = """
local r = tonumber(ARGV[1])
local pos = 2
local hit, all_applied = {'overlap'}, true
for i = 1, r do
  local applied = redis.call('HGET', KEYS[1], ARGV[pos])
  if applied and tonumber(applied) >= tonumber(ARGV[pos + 1]) then
    table.insert(hit, ARGV[pos]); table.insert(hit, applied)
  end
  if not (applied and tonumber(applied) >= tonumber(ARGV[pos + 2])) then all_applied = false end
  pos = pos + 3
end
if all_applied then return {'skipped'} end
if #hit > 1 then return hit end
local nd, ns, newest_report, now = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1]), ARGV[pos + 2], ARGV[pos + 3]
pos = pos + 4
local CHUNK = 4000
local function members(packed, s, e)
  local t = {}
  for j = s, e - 1 do t[#t + 1] = string.sub(packed, 8 * j + 1, 8 * j + 8) end
  return t
end
local sets = {}
for i = 1, nd do
  sets[i] = {tonumber(ARGV[pos]), ARGV[pos + 2], tonumber(ARGV[pos + 1])}
  pos = pos + 3
end
local dups = {'duplicates'}
for i = 1, nd do
  local packed, m = sets[i][2], sets[i][3]
  local s = 0
  while s < m do
    local e = math.min(s + CHUNK, m)
    local found = redis.call('SMISMEMBER', KEYS[4 + i], unpack(members(packed, s, e)))
    for j = 1, #found do
      if found[j] == 1 then
        table.insert(dups, i); table.insert(dups, string.sub(packed, 8 * (s + j - 1) + 1, 8 * (s + j)))
      end
    end
    s = e
  end
end
if #dups > 1 then return dups end
for i = 1, nd do
  local ttl, packed, m = sets[i][1], sets[i][2], sets[i][3]
  local s = 0
  while s < m do
    local e = math.min(s + CHUNK, m)
    redis.call('SADD', KEYS[4 + i], unpack(members(packed, s, e)))
    s = e
  end
  if ttl > 0 and m > 0 then redis.call('EXPIRE', KEYS[4 + i], ttl) end
end
for i = 1, ns do
  local key = KEYS[4 + nd + i]
  redis.call('ZADD', KEYS[3], 'NX', 0, ARGV[pos])
  local f = tonumber(ARGV[pos + 1])
  pos = pos + 2
  for j = 0, f - 1 do
    redis.call('HINCRBYFLOAT', key, ARGV[pos + 2 * j], ARGV[pos + 2 * j + 1])
  end
  pos = pos + 2 * f
end
local c = tonumber(ARGV[pos])
pos = pos + 1
for j = 0, c - 1 do
  redis.call('HINCRBY', KEYS[2], ARGV[pos + 2 * j], ARGV[pos + 2 * j + 1])
end
if newest_report ~= '' then
  local newest = redis.call('HGET', KEYS[4], 'newest_report_ms')
  if (not newest) or tonumber(newest) < tonumber(newest_report) then
    redis.call('HSET', KEYS[4], 'newest_report_ms', newest_report)
  end
end
redis.call('HSET', KEYS[4], 'applied_ms', now)
for i = 0, r - 1 do redis.call('HSET', KEYS[1], ARGV[2 + 3 * i], ARGV[4 + 3 * i]) end
return {'applied'}
"""


def stats_fields(devices: int, stats: dict[int, np.ndarray]) -> list[str]:
    """Flattened (field, increment) pairs of a window's statistics; zero increments are left out."""
    out = ["n", str(devices)] if devices else []
    for attr, vec in sorted(stats.items()):
        v = np.asarray(vec, dtype=np.float64)
        for i in np.flatnonzero(v):
            out += [f"a{attr}:{i}", repr(float(v[i]))]
    return out


class RedisStore(StatsStore):
    """The statistics in Redis; `apply` is one Lua script (atomic, single slot per collection)."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=5.0,
                                          retry_on_timeout=False)
        self._apply = self.redis.register_script(APPLY_SCRIPT)

    def apply(self, update: BatchUpdate) -> ApplyResult:
        p = prefix(update.collection)
        keys = [f"{p}:offsets", f"{p}:outcomes", f"{p}:windows", f"{p}:meta"]
        dedupe = [w for w in update.windows if w.dedupe is not None]
        args: list[str | bytes | int] = [len(update.ranges)]
        for r in update.ranges:
            args += [r.source, r.first, r.last]
        args += [len(dedupe), len(update.windows), "" if update.newest_report_ms is None else update.newest_report_ms,
                 _now_ms()]
        for w in dedupe:
            keys.append(f"{p}:seen:{window_member(w.version, w.window, w.start_ms)}")
            members = np.ascontiguousarray(w.dedupe, dtype="<u8")
            args += [w.dedupe_ttl_s, len(members), members.tobytes()]  # 8-byte LE members, split in the script
        for w in update.windows:
            member = window_member(w.version, w.window, w.start_ms)
            keys.append(f"{p}:{member}")
            pairs = stats_fields(w.devices, w.stats)
            args += [member, len(pairs) // 2, *pairs]
        args.append(len(update.outcomes))
        for k, n in sorted(update.outcomes.items()):
            args += [k, n]
        reply = self._apply(keys=keys, args=args)
        status = reply[0].decode()
        if status == "overlap":
            return ApplyResult(status, applied={reply[i].decode(): int(reply[i + 1]) for i in range(1, len(reply), 2)})
        if status != "duplicates":
            return ApplyResult(status)
        found: dict[tuple[int, str, int], list[int]] = defaultdict(list)
        for i in range(1, len(reply), 2):
            w = dedupe[int(reply[i]) - 1]
            device = np.frombuffer(reply[i + 1], dtype="<u8")[0]
            found[(w.version, w.window, w.start_ms)].append(int(device))
        return ApplyResult("duplicates", {k: np.asarray(v, dtype=np.uint64) for k, v in found.items()})

    def read_window(self, collection: str, version: int, window: str, start_ms: int,
                    sizes: dict[int, int]) -> WindowStats:
        raw = self._hash(f"{prefix(collection)}:{window_member(version, window, start_ms)}")
        return _window_from_fields({k: float(v) for k, v in raw.items()}, sizes)

    def windows(self, collection: str) -> list[tuple[int, str, int]]:
        members: list[bytes] = self.redis.zrange(f"{prefix(collection)}:windows", 0, -1)  # type: ignore[assignment]
        return sorted((parse_window_member(m.decode()) for m in members), key=lambda w: (w[0], w[2], w[1]))

    def offsets(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:offsets").items()}

    def outcomes(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:outcomes").items()}

    def freshness(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:meta").items()}

    def _hash(self, key: str) -> dict[str, bytes]:
        """A Redis hash with its field names decoded."""
        raw: dict[bytes, bytes] = self.redis.hgetall(key)  # type: ignore[assignment]
        return {k.decode(): v for k, v in raw.items()}

    def delete_collection(self, collection: str) -> int:
        """Delete every key of a collection (tests and `ldp` maintenance); returns how many."""
        keys = list(self.redis.scan_iter(match=f"{prefix(collection).replace('{', '[{]').replace('}', '[}]')}:*",
                                         count=1000))
        return int(self.redis.unlink(*keys)) if keys else 0  # UNLINK: big dedupe sets are freed in the background


def _window_from_fields(fields: dict[str, float], sizes: dict[int, int]) -> WindowStats:
    stats = {attr: np.zeros(size, dtype=np.float64) for attr, size in sizes.items()}
    for name, value in fields.items():
        if name.startswith("a"):
            attr, i = name[1:].split(":")
            if int(attr) in stats:
                stats[int(attr)][int(i)] = value
    return WindowStats(fields.get("n", 0.0), stats)


# ---------------------------------------------------------------------------------------------------------------
class MemoryStore(StatsStore):
    """The same contract in process memory (unit tests, offline runs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[str, dict[str, int]] = defaultdict(dict)
        self._outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._seen: dict[tuple[str, str], set[int]] = defaultdict(set)
        self._fields: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._windows: dict[str, set[str]] = defaultdict(set)
        self._meta: dict[str, dict[str, int]] = defaultdict(dict)

    def apply(self, update: BatchUpdate) -> ApplyResult:
        c = update.collection
        with self._lock:
            done = {r.source: self._offsets[c][r.source] for r in update.ranges if r.source in self._offsets[c]}
            if len(done) == len(update.ranges) and all(done[r.source] >= r.last for r in update.ranges):
                return ApplyResult("skipped")
            replayed = {r.source: done[r.source] for r in update.ranges
                        if r.source in done and done[r.source] >= r.first}
            if replayed:
                return ApplyResult("overlap", applied=replayed)
            dups: dict[tuple[int, str, int], np.ndarray] = {}
            for w in update.windows:
                if w.dedupe is None:
                    continue
                seen = self._seen[(c, window_member(w.version, w.window, w.start_ms))]
                hit = np.asarray([d for d in w.dedupe.tolist() if d in seen], dtype=np.uint64)
                if len(hit):
                    dups[(w.version, w.window, w.start_ms)] = hit
            if dups:
                return ApplyResult("duplicates", dups)
            for w in update.windows:
                member = window_member(w.version, w.window, w.start_ms)
                if w.dedupe is not None:
                    self._seen[(c, member)].update(w.dedupe.tolist())
                self._windows[c].add(member)
                fields = stats_fields(w.devices, w.stats)
                target = self._fields[(c, member)]
                for name, value in zip(fields[::2], fields[1::2], strict=True):
                    target[name] += float(value)
            for k, n in update.outcomes.items():
                self._outcomes[c][k] += n
            if update.newest_report_ms is not None:
                self._meta[c]["newest_report_ms"] = max(self._meta[c].get("newest_report_ms", 0),
                                                        update.newest_report_ms)
            self._meta[c]["applied_ms"] = _now_ms()
            for r in update.ranges:
                self._offsets[c][r.source] = r.last
            return ApplyResult("applied")

    def read_window(self, collection: str, version: int, window: str, start_ms: int,
                    sizes: dict[int, int]) -> WindowStats:
        with self._lock:
            fields = dict(self._fields.get((collection, window_member(version, window, start_ms)), {}))
        return _window_from_fields(fields, sizes)

    def windows(self, collection: str) -> list[tuple[int, str, int]]:
        return sorted((parse_window_member(m) for m in self._windows[collection]), key=lambda w: (w[0], w[2], w[1]))

    def offsets(self, collection: str) -> dict[str, int]:
        return dict(self._offsets[collection])

    def outcomes(self, collection: str) -> dict[str, int]:
        return dict(self._outcomes[collection])

    def freshness(self, collection: str) -> dict[str, int]:
        return dict(self._meta[collection])
