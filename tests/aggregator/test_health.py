"""The pipeline's health verdict (pure) and the worker registry behind it (real Redis)."""

from __future__ import annotations

import uuid

import pytest

from ldpstream.aggregator.health import CollectionProgress, HealthPolicy, WorkerRegistry, assess
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings

POLICY = HealthPolicy(heartbeat_max_age_s=10, stall_s=60, crash_limit=3, crash_window_s=300)
NOW = 1_800_000_000_000


def beat(wid: str, age_s: float, started_s_ago: float = 600) -> dict[str, object]:
    return {"id": wid, "group": "g", "beat_ms": NOW - int(age_s * 1000), "started_ms": NOW - int(started_s_ago * 1000)}


def test_alive_workers_and_drained_collections_are_healthy() -> None:
    health = assess([beat("h:1", 1)], [], [CollectionProgress("c", 0, NOW - 3_600_000)], NOW, POLICY)
    assert health.ok and health.reasons == [] and health.workers[0]["alive"]


def test_a_worker_that_stopped_beating_is_down() -> None:
    health = assess([beat("h:1", 1), beat("h:2", 11)], [], [], NOW, POLICY)
    assert not health.ok and health.reasons == ["worker h:2 (g) is down: last heartbeat 11 s ago"]


def test_a_live_process_that_no_longer_consumes_is_down() -> None:
    stuck = CollectionProgress("c", 1200, NOW - 61_000)
    health = assess([beat("h:1", 1)], [], [stuck, CollectionProgress("d", 5, NOW - 1000)], NOW, POLICY)
    assert health.reasons == ["collection c: 1200 messages waiting and no batch applied for 61 s"]


@pytest.mark.parametrize("workers, reason", [
    ([], "no worker is alive"),
    ([beat("h:1", 1, started_s_ago=70)], "no batch applied for 70 s"),
])
def test_a_collection_never_applied_stalls_once_a_worker_had_time(workers: list[dict[str, object]],
                                                                    reason: str) -> None:
    health = assess(workers, [], [CollectionProgress("c", 3, None)], NOW, POLICY)
    assert health.reasons == [f"collection c: 3 messages waiting and {reason}"]
    assert assess([beat("h:1", 1, started_s_ago=5)], [], [CollectionProgress("c", 3, None)], NOW, POLICY).ok


def test_crash_loops_count_within_their_window() -> None:
    crashes = [{"id": f"h:{i}", "code": 70, "at_ms": NOW - s * 1000} for i, s in enumerate((10, 100, 290, 400))]
    assert assess([], crashes, [], NOW, POLICY).reasons == [
        "crash loop: 3 abnormal worker exits in the last 300 s (exit codes [70])"]
    assert assess([], crashes[1:], [], NOW, POLICY).ok


def test_policy_from_the_environment() -> None:
    policy = HealthPolicy.from_env({"LDP_HEALTH_STALL_S": "5", "LDP_HEALTH_CRASH_LIMIT": "2"})
    assert (policy.stall_s, policy.crash_limit, policy.heartbeat_max_age_s) == (5.0, 2, 15.0)


@pytest.mark.integration
def test_the_registry_keeps_beats_and_crashes_in_redis(live_services: Settings) -> None:
    registry = WorkerRegistry(redis_client(live_services.redis), namespace=f"test-health-{uuid.uuid4().hex[:8]}")
    try:
        registry.beat("h:1", {"group": "g", "beat_ms": NOW, "started_ms": NOW})
        registry.beat("h:2", {"group": "g", "beat_ms": NOW - 10**9, "started_ms": NOW - 10**9})  # long gone
        registry.record_crash("h:3", "g", -9, NOW)
        assert [w["id"] for w in registry.workers(NOW)] == ["h:1"]
        assert registry.redis.hexists(registry.workers_key, "h:2")  # reading never writes (the API's user may not)
        registry.beat("h:1", {"group": "g", "beat_ms": NOW, "started_ms": NOW})
        assert not registry.redis.hexists(registry.workers_key, "h:2")  # a writer forgets the silent ones
        assert registry.crashes(NOW - 1) == [{"id": "h:3", "group": "g", "code": -9, "at_ms": NOW}]
        registry.leave("h:1")
        assert registry.workers(NOW) == []
    finally:
        registry.redis.delete(registry.workers_key, registry.crashes_key)
