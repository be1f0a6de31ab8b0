"""The statistics store: additive per-window statistics, guarded by the last applied offset of each partition.

One contract, two backends (`RedisStore`, `MemoryStore`), run through the same tests. `apply(update)` is the
only write, and it is atomic (one Lua script in Redis):

1. If, for every partition the batch read, its last offset is <= the offset already applied there, nothing is
   written: the batch is a replay (after a crash or a rebalance) and is `skipped`. If for some partition its first
   offset is, nothing is written either (`overlap`): the caller drops the messages already applied and tries again.
2. If for some partition its first offset is beyond applied + 1, nothing is written (`gap`): the store has gone
   back in time (below), and applying the batch would skip the messages in between for good. The caller reads
   the partition again from applied + 1. (A report partition's offsets are consecutive: its producers are
   idempotent, not transactional, and it is not compacted.)
3. If for some partition the applied offset is not the one the caller's dedupe state was read at (`expected`:
   another worker applied batches since), nothing is written (`stale`): the caller reloads and tries again.
4. Otherwise, in one step: the batch's new devices are appended to their partition's dedupe list of the window,
   the statistics increments are added, the outcome counters are added, the window index and freshness are
   updated, and the partition's offset is recorded.

Dedupe is partition-local: a device's reports all go to one partition of the topic (`ldpstream.contract.pseudonym.
device_partitions`, enforced by the aggregator), so whether a device has reported in a window is a question about
one partition, which one worker owns at a time. The worker keeps each partition's devices per window in memory
(`ldpstream.aggregator.dedupe`), loaded with `seen_devices` together with the applied offset they match; the store keeps
them as one string of 8-byte words per (window, partition), appended to atomically with the offset. Step 3 makes
the in-memory copy safe when the partition has moved between workers meanwhile.

What happens if the worker dies: before the script runs, nothing of the batch is in the store and the partition
resumes (seek) after the recorded offset, so the batch is read and applied again; after it ran, the batch is all
in the store and its replay is skipped at step 1. Kafka's committed offset is never trusted for this.

What happens if the store goes back in time (Redis loses writes it acknowledged: the tail of its append-only file after
a crash, or a failover to a replica that lagged): whole scripts are lost, so its offsets, statistics, counters and
dedupe lists go back together, to a state as if the lost batches had never been applied. The next batch is refused at
step 2, the worker reads the partition again from applied + 1 and applies the lost batches once more
(`ldpstream.aggregator.worker`). Kafka must still have them: if retention has deleted messages after the applied offset,
`skip_lost` moves the offset over them and the loss is reported (`ldpstream.runtime.offsets`), never silently.

Keys share one hash tag per collection (`ldp:{NAME}:...`) so one script touches one Redis Cluster slot.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ldpstream.contract.clock import now_ms
from ldpstream.contract.shuffled import DUE_FIELD, WindowFigures, decode_figures, figures_key
from ldpstream.runtime.offsets import NOT_APPLIED
from ldpstream.runtime.redis import move_applied_offset, redis_client

ALL_TIME = "all"
READ_CHUNK = 200  # windows per pipelined read (`RedisStore.read_windows`)

WindowKey = tuple[int, str, int]  # (spec version, window, start ms)


@dataclass(frozen=True)
class WindowIncrement:
    """What one batch adds to one window of one collection version."""

    version: int
    window: str
    start_ms: int
    devices: int
    stats: dict[int, np.ndarray]
    dedupe: dict[int, np.ndarray] | None = None  # partition -> uint64 devices counted now in this dedupe window
    dedupe_ttl_s: int = 0


@dataclass(frozen=True)
class OffsetRange:
    """The offsets a micro-batch read from one partition, and the applied offset its dedupe was checked against
    (None: not checked)."""

    source: str  # "topic:partition"
    first: int
    last: int
    expected: int | None = None


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
    """`applied`, or why nothing was written: `skipped` (every range applied before), `overlap` (some range partly
    or wholly applied), `gap` (some range starts beyond its applied offset + 1) or `stale` (some partition's applied
    offset is not the expected one); for the last three, `applied` has those sources' applied offsets."""

    status: str
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
        """Apply a batch atomically unless it is a replay or was deduplicated against a stale state."""

    @abstractmethod
    def seen_devices(self, collection: str, source: str, partition: int,
                     windows: list[WindowKey]) -> tuple[int, dict[WindowKey, np.ndarray]]:
        """A partition's applied offset (NOT_APPLIED if none) and, read at that same offset, the devices counted
        from it in each of the dedupe windows (uint64, in the order they were counted)."""

    @abstractmethod
    def skip_lost(self, collection: str, source: str, applied: int, log_start: int) -> bool:
        """Move a partition's applied offset from `applied` over messages Kafka no longer has, to `log_start` - 1,
        atomically; False (nothing written) if it is not `applied` any more
        (`ldpstream.runtime.offsets.resume_offset`)."""

    @abstractmethod
    def read_window(self, collection: str, version: int, window: str, start_ms: int,
                    sizes: dict[int, int]) -> WindowStats:
        """The statistics of a window (`sizes`: statistics length per attribute index)."""

    def read_windows(self, collection: str, version: int, window: str, starts: list[int],
                     sizes: dict[int, int]) -> list[WindowStats]:
        """The statistics of several windows of one length, in the order of `starts` (a series' reads)."""
        return [self.read_window(collection, version, window, start, sizes) for start in starts]

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

    def shuffle_figures(self, collection: str) -> list[WindowFigures]:
        """The figures the shuffler published for a shuffled collection's released windows, oldest first (none for
        a store without them)."""
        return []

    def shuffle_due_ms(self, collection: str) -> int | None:
        """When the shuffler's next close of a shuffled collection is due (epoch ms; None before its first close,
        or for a store without it)."""
        return None

    @abstractmethod
    def put_poisoning(self, collection: str, key: WindowKey, record: bytes) -> None:
        """Keep a closed window's poisoning audit (`ldpstream.aggregator.audit`), replacing an earlier one; apart
        from the statistics, which it never changes."""

    @abstractmethod
    def poisoning(self, collection: str) -> dict[WindowKey, bytes]:
        """The poisoning audits of a collection's windows, by (version, window, start ms)."""

    @abstractmethod
    def put_acceptance(self, collection: str, member: str, record: bytes) -> None:
        """Keep an operator's acceptance of an attribute's new level (`ldpstream.aggregator.poisoning.accept`),
        replacing an earlier one of the same `member` (spec version, window length and attribute)."""

    @abstractmethod
    def acceptances(self, collection: str) -> dict[str, bytes]:
        """A collection's acceptances, by member."""

    @abstractmethod
    def claim_audit(self, collection: str, key: WindowKey, owner: str, ttl_s: int) -> bool:
        """Whether `owner` may audit the window now: true for the first to ask until `ttl_s` has passed (so that
        of several auditors, one audits each window; an auditor that dies frees it when the claim expires)."""


def prefix(collection: str) -> str:
    """The key prefix of a collection, with its Redis Cluster hash tag."""
    return f"ldp:{{{collection}}}"


def window_member(version: int, window: str, start_ms: int) -> str:
    return f"v{version}:{window}:{start_ms}"


def poisoning_key(collection: str) -> str:
    """The hash of a collection's poisoning audits, one field per audited window (`window_member`)."""
    return f"{prefix(collection)}:poisoning"


def acceptance_key(collection: str) -> str:
    """The hash of a collection's acceptances of a new level, one field per spec version, window length and
    attribute."""
    return f"{prefix(collection)}:accepted"


def seen_member(key: WindowKey, partition: int) -> str:
    """The name of a partition's dedupe list in a window (under the collection's prefix)."""
    return f"seen:{window_member(*key)}:p{partition}"


def packed(devices: np.ndarray) -> bytes:
    """Devices as the store keeps them: 8-byte little-endian words."""
    return np.ascontiguousarray(devices, dtype="<u8").tobytes()


def unpacked(data: bytes | None) -> np.ndarray:
    return np.frombuffer(data or b"", dtype="<u8").astype(np.uint64)


def parse_window_member(member: str) -> tuple[int, str, int]:
    v, window, start = member.split(":")
    return int(v[1:]), window, int(start)


# ---------------------------------------------------------------------------------------------------------------
# Redis
# KEYS: 1 offsets, 2 outcomes, 3 windows index, 4 meta, then nd dedupe strings, then ns stats hashes.
# ARGV: 1 r, then r (source, first offset, last offset, expected applied offset or '') quadruples; then nd, ns,
#       newest report ms (or ''), now ms; then per dedupe string: ttl, the new devices packed as 8-byte LE words;
#       per stats hash: window member, f, f (field, increment) pairs; then c, c (outcome, n) pairs.
APPLY_SCRIPT = """
local r = tonumber(ARGV[1])
local pos = 2
local overlap, gap, stale, all_applied = {'overlap'}, {'gap'}, {'stale'}, true
for i = 1, r do
  local source, first, last, expected = ARGV[pos], tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2]), ARGV[pos + 3]
  local applied = tonumber(redis.call('HGET', KEYS[1], source) or '-1')
  if applied >= first then table.insert(overlap, source); table.insert(overlap, applied)
  elseif applied + 1 < first then table.insert(gap, source); table.insert(gap, applied) end
  if applied < last then all_applied = false end
  if expected ~= '' and applied ~= tonumber(expected) then
    table.insert(stale, source); table.insert(stale, applied)
  end
  pos = pos + 4
end
if all_applied then return {'skipped'} end
if #overlap > 1 then return overlap end
if #gap > 1 then return gap end
if #stale > 1 then return stale end
local nd, ns, newest_report, now = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1]), ARGV[pos + 2], ARGV[pos + 3]
pos = pos + 4
for i = 1, nd do
  local ttl = tonumber(ARGV[pos])
  redis.call('APPEND', KEYS[4 + i], ARGV[pos + 1])
  if ttl > 0 then redis.call('EXPIRE', KEYS[4 + i], ttl) end
  pos = pos + 2
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
for i = 0, r - 1 do redis.call('HSET', KEYS[1], ARGV[2 + 4 * i], ARGV[4 + 4 * i]) end
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
        self.redis = redis_client(url, timeout_s, retry_on_timeout=False)
        self._apply = self.redis.register_script(APPLY_SCRIPT)

    def apply(self, update: BatchUpdate) -> ApplyResult:
        p = prefix(update.collection)
        keys = [f"{p}:offsets", f"{p}:outcomes", f"{p}:windows", f"{p}:meta"]
        appends = [(f"{p}:{seen_member((w.version, w.window, w.start_ms), part)}", w.dedupe_ttl_s, packed(devices))
                   for w in update.windows for part, devices in sorted((w.dedupe or {}).items()) if len(devices)]
        args: list[str | bytes | int] = [len(update.ranges)]
        for r in update.ranges:
            args += [r.source, r.first, r.last, "" if r.expected is None else r.expected]
        args += [len(appends), len(update.windows), "" if update.newest_report_ms is None else update.newest_report_ms,
                 now_ms()]
        for key, ttl, data in appends:
            keys.append(key)
            args += [ttl, data]
        for w in update.windows:
            member = window_member(w.version, w.window, w.start_ms)
            keys.append(f"{p}:{member}")
            pairs = stats_fields(w.devices, w.stats)
            args += [member, len(pairs) // 2, *pairs]
        args.append(len(update.outcomes))
        for k, n in sorted(update.outcomes.items()):
            args += [k, n]
        reply = self._apply(keys=keys, args=args)
        return ApplyResult(reply[0].decode(), {reply[i].decode(): int(reply[i + 1]) for i in range(1, len(reply), 2)})

    def seen_devices(self, collection: str, source: str, partition: int,
                     windows: list[WindowKey]) -> tuple[int, dict[WindowKey, np.ndarray]]:
        p = prefix(collection)
        with self.redis.pipeline(transaction=True) as pipe:  # MULTI/EXEC: the lists as of that offset
            pipe.hget(f"{p}:offsets", source)
            for key in windows:
                pipe.get(f"{p}:{seen_member(key, partition)}")
            applied, *lists = pipe.execute()
        return (NOT_APPLIED if applied is None else int(applied)), {
            key: unpacked(data) for key, data in zip(windows, lists, strict=True)}

    def skip_lost(self, collection: str, source: str, applied: int, log_start: int) -> bool:
        return move_applied_offset(self.redis, f"{prefix(collection)}:offsets", source, applied, log_start - 1)

    def read_window(self, collection: str, version: int, window: str, start_ms: int,
                    sizes: dict[int, int]) -> WindowStats:
        raw = self._hash(f"{prefix(collection)}:{window_member(version, window, start_ms)}")
        return _window_from_fields({k: float(v) for k, v in raw.items()}, sizes)

    def read_windows(self, collection: str, version: int, window: str, starts: list[int],
                     sizes: dict[int, int]) -> list[WindowStats]:
        """One pipelined round trip per READ_CHUNK windows instead of one per window, each reading only the fields
        of the attributes in `sizes` (a series reads one attribute of many)."""
        names = ["n", *(f"a{attr}:{i}" for attr, size in sorted(sizes.items()) for i in range(size))]
        out = []
        for lo in range(0, len(starts), READ_CHUNK):
            with self.redis.pipeline(transaction=False) as pipe:
                for start in starts[lo:lo + READ_CHUNK]:
                    pipe.hmget(f"{prefix(collection)}:{window_member(version, window, start)}", names)
                rows: list[list[bytes | None]] = pipe.execute()
            out += [_window_from_fields({k: float(v) for k, v in zip(names, row, strict=True) if v is not None},
                                        sizes) for row in rows]
        return out

    def windows(self, collection: str) -> list[tuple[int, str, int]]:
        members: list[bytes] = self.redis.zrange(f"{prefix(collection)}:windows", 0, -1)  # type: ignore[assignment]
        return sorted((parse_window_member(m.decode()) for m in members), key=lambda w: (w[0], w[2], w[1]))

    def offsets(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:offsets").items()}

    def outcomes(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:outcomes").items()}

    def freshness(self, collection: str) -> dict[str, int]:
        return {k: int(v) for k, v in self._hash(f"{prefix(collection)}:meta").items()}

    def shuffle_figures(self, collection: str) -> list[WindowFigures]:
        figures = [decode_figures(v) for k, v in self._hash(figures_key(collection)).items() if k != DUE_FIELD]
        return sorted((f for f in figures if f is not None), key=lambda f: (f.spec_version, f.window_ms))

    def shuffle_due_ms(self, collection: str) -> int | None:
        raw = self.redis.hget(figures_key(collection), DUE_FIELD)
        try:
            return int(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # none yet, or not a number (a store is outside bytes too)
            return None

    def put_poisoning(self, collection: str, key: WindowKey, record: bytes) -> None:
        self.redis.hset(poisoning_key(collection), window_member(*key), record)

    def poisoning(self, collection: str) -> dict[WindowKey, bytes]:
        return {parse_window_member(k): v for k, v in self._hash(poisoning_key(collection)).items()}

    def put_acceptance(self, collection: str, member: str, record: bytes) -> None:
        self.redis.hset(acceptance_key(collection), member, record)

    def acceptances(self, collection: str) -> dict[str, bytes]:
        return self._hash(acceptance_key(collection))

    def claim_audit(self, collection: str, key: WindowKey, owner: str, ttl_s: int) -> bool:
        return bool(self.redis.set(f"{prefix(collection)}:auditing:{window_member(*key)}", owner, nx=True, ex=ttl_s))

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
        self._seen: dict[tuple[str, str], bytearray] = defaultdict(bytearray)
        self._fields: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._windows: dict[str, set[str]] = defaultdict(set)
        self._meta: dict[str, dict[str, int]] = defaultdict(dict)
        self._poisoning: dict[str, dict[WindowKey, bytes]] = defaultdict(dict)
        self._accepted: dict[str, dict[str, bytes]] = defaultdict(dict)
        self._claims: dict[tuple[str, WindowKey], tuple[str, float]] = {}

    def apply(self, update: BatchUpdate) -> ApplyResult:
        c = update.collection
        with self._lock:
            applied = {r.source: self._offsets[c].get(r.source, NOT_APPLIED) for r in update.ranges}
            if all(applied[r.source] >= r.last for r in update.ranges):
                return ApplyResult("skipped")
            for status, hit in (("overlap", lambda r: applied[r.source] >= r.first),
                                ("gap", lambda r: applied[r.source] + 1 < r.first),
                                ("stale", lambda r: r.expected is not None and applied[r.source] != r.expected)):
                found = {r.source: applied[r.source] for r in update.ranges if hit(r)}
                if found:
                    return ApplyResult(status, found)
            for w in update.windows:
                member = window_member(w.version, w.window, w.start_ms)
                for part, devices in (w.dedupe or {}).items():
                    self._seen[(c, seen_member((w.version, w.window, w.start_ms), part))] += packed(devices)
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
            self._meta[c]["applied_ms"] = now_ms()
            for r in update.ranges:
                self._offsets[c][r.source] = r.last
            return ApplyResult("applied")

    def seen_devices(self, collection: str, source: str, partition: int,
                     windows: list[WindowKey]) -> tuple[int, dict[WindowKey, np.ndarray]]:
        with self._lock:
            lists = {key: unpacked(bytes(self._seen.get((collection, seen_member(key, partition)), b"")))
                     for key in windows}
            return self._offsets[collection].get(source, NOT_APPLIED), lists

    def skip_lost(self, collection: str, source: str, applied: int, log_start: int) -> bool:
        with self._lock:
            if self._offsets[collection].get(source, NOT_APPLIED) != applied:
                return False
            self._offsets[collection][source] = log_start - 1
            return True

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

    def put_poisoning(self, collection: str, key: WindowKey, record: bytes) -> None:
        with self._lock:
            self._poisoning[collection][key] = bytes(record)

    def poisoning(self, collection: str) -> dict[WindowKey, bytes]:
        with self._lock:
            return dict(self._poisoning[collection])

    def put_acceptance(self, collection: str, member: str, record: bytes) -> None:
        with self._lock:
            self._accepted[collection][member] = bytes(record)

    def acceptances(self, collection: str) -> dict[str, bytes]:
        with self._lock:
            return dict(self._accepted[collection])

    def claim_audit(self, collection: str, key: WindowKey, owner: str, ttl_s: int) -> bool:
        with self._lock:
            now = time.monotonic()
            held = self._claims.get((collection, key))
            if held is not None and held[1] > now:
                return False
            self._claims[(collection, key)] = (owner, now + ttl_s)
            return True
