"""Pipeline health that tells the truth: a live process that no longer consumes is down.

Every worker beats every HEARTBEAT_S into one Redis hash (`ldp:health:workers`: worker id -> JSON with its group,
pid, start time, last beat and batches applied; a clean stop removes the entry, one silent for FORGET_WORKER_MS is
forgotten), and its supervisor records each abnormal exit in a sorted set (`ldp:health:crashes`). `assess`
(pure) turns those, and each collection's progress (messages waiting in Kafka, time of the last applied batch),
into a verdict with its reasons:
- a worker whose last beat is older than `heartbeat_max_age_s` is down (a clean stop removes its entry);
- `crash_limit` or more abnormal exits within `crash_window_s` is a crash loop;
- a collection with messages waiting whose last applied batch is older than `stall_s` (or that has waited that
  long without any batch applied) is stalled: whatever the processes say, nothing consumes it.
Thresholds come from the environment (`HealthPolicy.from_env`): LDP_HEALTH_STALL_S, LDP_HEALTH_HEARTBEAT_S,
LDP_HEALTH_CRASH_LIMIT, LDP_HEALTH_CRASH_WINDOW_S.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ldpstream.aggregator.store import RedisStore, StatsStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.topics import source
from ldpstream.runtime.redis import SyncRedis

EndOffsets = Callable[[Sequence[str]], Mapping[tuple[str, int], int]]

HEARTBEAT_S = 2.0
NAMESPACE = "ldp:health"
FORGET_WORKER_MS = 300 * 1000  # a worker silent this long is forgotten (reported down until then)
FORGET_CRASH_MS = 3600 * 1000


def worker_id(pid: int | None = None) -> str:
    """host:pid of a worker process (this one by default)."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


@dataclass(frozen=True)
class HealthPolicy:
    """When the pipeline counts as unhealthy."""

    heartbeat_max_age_s: float = 15.0
    stall_s: float = 60.0
    crash_limit: int = 3
    crash_window_s: float = 300.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HealthPolicy:
        e = os.environ if env is None else env
        return cls(heartbeat_max_age_s=float(e.get("LDP_HEALTH_HEARTBEAT_S", cls.heartbeat_max_age_s)),
                   stall_s=float(e.get("LDP_HEALTH_STALL_S", cls.stall_s)),
                   crash_limit=int(e.get("LDP_HEALTH_CRASH_LIMIT", cls.crash_limit)),
                   crash_window_s=float(e.get("LDP_HEALTH_CRASH_WINDOW_S", cls.crash_window_s)))


@dataclass(frozen=True)
class CollectionProgress:
    """How far the workers are with one collection: messages waiting in Kafka, and when a batch was last applied
    (None: never)."""

    name: str
    waiting: int
    applied_ms: int | None


@dataclass(frozen=True)
class Health:
    """The verdict: ok, why not, and what it was based on."""

    ok: bool
    reasons: list[str]
    workers: list[dict[str, Any]] = field(default_factory=list)
    collections: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "reasons": self.reasons, "workers": self.workers, "collections": self.collections}


def assess(workers: Sequence[Mapping[str, Any]], crashes: Sequence[Mapping[str, Any]],
           collections: Sequence[CollectionProgress], now_ms: int, policy: HealthPolicy) -> Health:
    """The pipeline's health from worker beats, recent abnormal exits and collections' progress (module docstring).

    Examples
    --------
    >>> policy = HealthPolicy(stall_s=60)
    >>> assess([], [], [CollectionProgress("c", 0, None)], 10**6, policy).ok
    True
    >>> assess([], [], [CollectionProgress("c", 5, 0)], 120_000, policy).reasons
    ['collection c: 5 messages waiting and no batch applied for 120 s']
    """
    reasons = []
    shown = []
    for w in workers:
        age_s = (now_ms - int(w["beat_ms"])) / 1000
        alive = age_s <= policy.heartbeat_max_age_s
        shown.append({**w, "alive": alive, "beat_age_s": round(age_s, 1)})
        if not alive:
            reasons.append(f"worker {w['id']} ({w.get('group', '?')}) is down: last heartbeat {age_s:.0f} s ago")
    recent = [c for c in crashes if now_ms - int(c["at_ms"]) <= policy.crash_window_s * 1000]
    if len(recent) >= policy.crash_limit:
        reasons.append(f"crash loop: {len(recent)} abnormal worker exits in the last {policy.crash_window_s:.0f} s "
                       f"(exit codes {sorted({c['code'] for c in recent})})")
    started = min((int(w["started_ms"]) for w in shown if w["alive"]), default=None)
    progress = []
    for c in collections:
        since = c.applied_ms if c.applied_ms is not None else started
        idle_s = None if since is None else (now_ms - since) / 1000
        stalled = c.waiting > 0 and (idle_s is None or idle_s > policy.stall_s)
        progress.append({"collection": c.name, "waiting": c.waiting, "applied_ms": c.applied_ms,
                         "stalled": stalled})
        if stalled:
            what = "no worker is alive" if idle_s is None else f"no batch applied for {idle_s:.0f} s"
            reasons.append(f"collection {c.name}: {c.waiting} messages waiting and {what}")
    return Health(not reasons, reasons, shown, progress)


def pipeline_health(store: RedisStore | StatsStore, topics: Mapping[str, str], end_offsets: EndOffsets,
                    policy: HealthPolicy, groups: Collection[str] | None = None,
                    shuffled: Collection[str] = ()) -> Health:
    """The health of the pipeline behind a store (workers and crashes from its Redis, of the consumer `groups` or
    all; with a store of another kind only the collections' progress counts)."""
    now = now_ms()
    registry = WorkerRegistry(store.redis) if isinstance(store, RedisStore) else None
    workers = registry.workers(now) if registry else []
    crashes = registry.crashes(now - int(policy.crash_window_s * 1000)) if registry else []
    if groups is not None:
        workers = [w for w in workers if w.get("group") in groups]
        crashes = [c for c in crashes if c.get("group") in groups]
    return assess(workers, crashes, collection_progress(store, topics, end_offsets, shuffled), now, policy)


def silent(beat: Mapping[str, Any], now_ms: int) -> bool:
    """True for a worker's beat older than FORGET_WORKER_MS: it is forgotten."""
    return now_ms - int(beat["beat_ms"]) > FORGET_WORKER_MS


class WorkerRegistry:
    """Worker heartbeats and abnormal exits in Redis."""

    def __init__(self, client: SyncRedis, namespace: str = NAMESPACE) -> None:
        self.redis = client
        self.workers_key, self.crashes_key = f"{namespace}:workers", f"{namespace}:crashes"

    def beat(self, wid: str, info: Mapping[str, Any]) -> None:
        """Record a worker's beat (`info` has its `beat_ms`), and forget workers silent for FORGET_WORKER_MS: the
        writers prune, so readers (the API's read-only Redis user) only read."""
        self.redis.hset(self.workers_key, wid, json.dumps({**info, "id": wid}))
        raw: dict[bytes, bytes] = self.redis.hgetall(self.workers_key)  # type: ignore[assignment]
        gone = [b["id"] for b in map(json.loads, raw.values()) if silent(b, int(info["beat_ms"]))]
        if gone:
            self.redis.hdel(self.workers_key, *gone)

    def leave(self, wid: str) -> None:
        self.redis.hdel(self.workers_key, wid)

    def record_crash(self, wid: str, group: str, code: int, now_ms: int) -> None:
        """An abnormal exit (non-zero code, or killed by a signal: negative) of a worker."""
        entry = json.dumps({"id": wid, "group": group, "code": code, "at_ms": now_ms})
        self.redis.zadd(self.crashes_key, {entry: now_ms})
        self.redis.zremrangebyscore(self.crashes_key, "-inf", now_ms - FORGET_CRASH_MS)
        self.leave(wid)

    def workers(self, now_ms: int) -> list[dict[str, Any]]:
        """Every worker's last beat, but those silent for FORGET_WORKER_MS (read only)."""
        raw: dict[bytes, bytes] = self.redis.hgetall(self.workers_key)  # type: ignore[assignment]
        beats = [json.loads(v) for v in raw.values()]
        return sorted((b for b in beats if not silent(b, now_ms)), key=lambda b: b["id"])

    def crashes(self, since_ms: int) -> list[dict[str, Any]]:
        members: list[bytes] = self.redis.zrangebyscore(self.crashes_key, since_ms, "+inf")  # type: ignore[assignment]
        return [json.loads(m) for m in members]


def partition_lag(store: StatsStore, topics: Mapping[str, str], ends: Mapping[tuple[str, int], int],
                  shuffled: Collection[str] = ()) -> dict[tuple[str, int], int]:
    """Per (collection, partition): messages not applied yet, the partition's end offset - (applied offset + 1);
    `topics`: collection -> report topic, `ends`: (topic, partition) -> end offset. A `shuffled` collection's
    partitions end with the marker of the shuffler's last transaction, which is no message: one offset less."""
    names = {topic: name for name, topic in topics.items()}
    applied = {name: store.offsets(name) for name in topics}
    return {(names[t], p): max(end - (applied[names[t]].get(source(t, p), -1) + 1) - (names[t] in shuffled), 0)
            for (t, p), end in sorted(ends.items()) if t in names}


def collection_progress(store: StatsStore, topics: Mapping[str, str], end_offsets: EndOffsets,
                        shuffled: Collection[str] = ()) -> list[CollectionProgress]:
    """Each collection's (name -> report topic) messages waiting and the time of its last applied batch."""
    lag = partition_lag(store, topics, end_offsets(list(topics.values())), shuffled)
    return [CollectionProgress(name, max(sum(n for (c, _), n in lag.items() if c == name), 0),
                               store.freshness(name).get("applied_ms")) for name in sorted(topics)]
