"""A store that goes back in time: Redis loses writes it acknowledged, and the worker reads the lost ground again.

Each test runs a Redis of its own (`fault_support.RedisServer`) and the shared Kafka; the store really goes back
(asserted), and afterwards every report is counted exactly once with the statistics of an uninterrupted run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from fault_support import RedisServer, TcpProxy, log_times, wait_for
from pipeline_support import (
    Collection,
    assert_statistics_equal,
    published_collection,
    reference_run,
    send_in_background,
    topic_messages,
)

from ldpstream.aggregator.processes import stop_worker
from ldpstream.aggregator.store import NOT_APPLIED, RedisStore
from ldpstream.contract.wire import decode
from ldpstream.runtime.access import ADMIN
from ldpstream.runtime.kafka import admin_client
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration

DEVICES = 200_000
GAP_LINE = "the store went back in time"


def went_back(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The partitions whose applied offset is lower in `after`, with that offset."""
    return {k: after.get(k, NOT_APPLIED) for k, v in before.items() if after.get(k, NOT_APPLIED) < v}


def aggregate_through_a_regression(c: Collection, log: Path, seed: int, start_losing: Callable[[], None],
                                   lose: Callable[[], None], quiet: bool = False) -> None:
    """A worker aggregates a fleet; mid-stream, `start_losing()` marks where the store's writes start to be lost,
    and after more batches (`quiet`: after the last report, so that no batch comes to find the gap) `lose()` makes
    the store go back in time to that mark. Then every report must be counted once, as in an uninterrupted run."""
    fleet = send_in_background(c, DEVICES, rate=25_000, seed=seed)
    worker = c.start_worker(log)
    alive = lambda: worker.poll() is None  # noqa: E731 - a re-executed worker keeps its pid
    try:
        assert c.wait_accepted(30_000, 120, alive) >= 30_000, "the stream did not start"
        start_losing()
        if quiet:
            fleet.join()
            assert c.wait_accepted(DEVICES, 240, alive) == DEVICES
        else:
            accepted = c.accepted()
            wait_for(lambda: c.accepted() >= accepted + 40_000, 60, "more batches applied after the mark")
        before = c.store.offsets(c.spec.name)
        lose()
        came_back = time.time()
        c.store = RedisStore(c.cfg.redis)
        behind = went_back(before, c.store.offsets(c.spec.name))
        assert behind, f"the store did not go back in time: {before} -> {c.store.offsets(c.spec.name)}"
        wait_for(lambda: all(c.store.offsets(c.spec.name).get(k, NOT_APPLIED) > v for k, v in behind.items()),
                 120, "every partition that went back to be applied again")
        resumed = time.time()
        fleet.join()
        assert c.wait_accepted(DEVICES, 240, alive) == DEVICES
    finally:
        stop_worker(worker)
    gaps = [t for t in log_times(log, GAP_LINE) if t >= came_back - 1]
    assert gaps, "the worker did not log the gap"
    print(f"\n{len(behind)} partition(s) went back by {sum(before[k] - v for k, v in behind.items())} messages; "
          f"gap noticed {gaps[0] - came_back:.2f} s after the store came back, every such partition applying "
          f"again {resumed - gaps[0]:.2f} s after that")
    # the worker has exited: nothing more can arrive, and a replay counted twice would show here
    assert c.store.outcomes(c.spec.name) == {"accepted": DEVICES}
    assert_statistics_equal(c, reference_run(c))


@pytest.mark.parametrize("quiet", [False, True], ids=["more-reports-after", "no-report-after"])
def test_redis_killed_with_the_tail_of_its_append_only_file_lost(live_services: Settings, tmp_path: Path,
                                                                 quiet: bool) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    with ExitStack() as stack:
        stack.callback(server.stop)
        c = stack.enter_context(published_collection(replace(live_services, redis_url=server.url)))
        cut: list[int] = []

        def mark() -> None:  # what the disk will have kept: the writes after this never get there
            cut.append(server.incr_aof().stat().st_size)

        def crash_and_lose_the_tail() -> None:
            server.kill()
            server.cut_aof(cut[0])
            server.start()

        aggregate_through_a_regression(c, tmp_path / "worker.log", 31, mark, crash_and_lose_the_tail, quiet)


def replication(server: RedisServer, field: str) -> str:
    """A field of the server's INFO replication section."""
    return str(server.client().info("replication").get(field))


@pytest.fixture
def primary_and_replica(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer, TcpProxy]]:
    """A primary, and a replica of it whose replication link runs through a proxy (so that it can be cut)."""
    with ExitStack() as stack:
        primary = RedisServer(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
        primary.start()
        stack.callback(primary.stop)
        link = TcpProxy(primary.port)
        stack.callback(link.close)
        replica = RedisServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(link.port))
        replica.start()
        stack.callback(replica.stop)
        wait_for(lambda: replication(replica, "master_link_status") == "up", 30, "the replica in sync")
        yield primary, replica, link


def test_failover_to_a_replica_that_lagged(live_services: Settings, tmp_path: Path,
                                           primary_and_replica: tuple[RedisServer, RedisServer, TcpProxy]) -> None:
    primary, replica, link = primary_and_replica
    front = TcpProxy(primary.port)  # the address the worker knows: moved to the new primary on failover
    with ExitStack() as stack:
        stack.callback(front.close)
        c = stack.enter_context(published_collection(
            replace(live_services, redis_url=f"redis://127.0.0.1:{front.port}/0")))

        def fail_over_to_the_lagging_replica() -> None:
            lag = int(replication(primary, "master_repl_offset")) - int(replication(replica, "slave_repl_offset"))
            lagging = RedisStore(replica.url).offsets(c.spec.name)
            assert lag > 0 and went_back(c.store.offsets(c.spec.name), lagging), (lag, lagging)
            primary.kill()
            replica.client().execute_command("REPLICAOF", "NO", "ONE")
            front.switch(replica.port)

        # the replica stops receiving the primary's writes (its link is cut): it lags from there
        aggregate_through_a_regression(c, tmp_path / "worker.log", 32, lambda: link.switch(None),
                                       fail_over_to_the_lagging_replica)


def test_reports_kafka_deleted_before_they_were_applied_are_reported_and_not_waited_for(
        collection: Collection, tmp_path: Path) -> None:
    sent = send_in_background(collection, 40_000, seed=33).join()
    topic = collection.spec.topic
    messages = topic_messages(collection.cfg.bootstrap, topic)
    cut = {0: len(messages[0]) // 2, 3: 1}  # retention deletes these first offsets before any worker ran
    admin = admin_client(collection.cfg.bootstrap)  # must outlive the futures
    futures = admin.delete_records([TopicPartition(topic, p, offset) for p, offset in cut.items()])
    for future in futures.values():
        future.result(30)
    lost = sum(len(decode(m.value)) for p, offset in cut.items() for m in messages[p][:offset])
    log = tmp_path / "worker.log"
    worker = collection.start_worker(log)
    try:
        ends = {f"{topic}:{p}": len(ms) - 1 for p, ms in messages.items()}
        wait_for(lambda: collection.store.offsets(collection.spec.name) == ends or worker.poll() is not None, 120,
                 "every partition applied to its end")
    finally:
        stop_worker(worker)
    assert collection.store.outcomes(collection.spec.name) == {"accepted": sent.reports - lost}
    reported = sorted(re.findall(r"\[ERROR\] (\S+: offsets \d+ to \d+) were deleted by Kafka's retention",
                                 log.read_text()))
    assert reported == [f"{topic}:0: offsets 0 to {cut[0] - 1}", f"{topic}:3: offsets 0 to 0"]


def test_a_restarted_redis_reloads_every_scripted_write(live_services: Settings, tmp_path: Path) -> None:
    """With the project's ACL users, a clean restart replays the append-only file whole: scripts (logged as
    MULTI/EXEC of their effects) and transactions too. (Redis replays as the default user; with `-@all` on it, every
    EXEC was refused at load and the writes vanished, the only trace a log line.)"""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        aggregator = redis_client(server.url, 5.0, principal="aggregator")
        aggregator.eval("redis.call('HINCRBY', KEYS[1], 'accepted', 7); redis.call('APPEND', KEYS[2], 'ab')", 2,
                        "ldp:{acl}:outcomes", "ldp:{acl}:seen")
        with aggregator.pipeline(transaction=True) as pipe:
            pipe.hset("ldp:{acl}:offsets", "t:0", 41).hset("ldp:{acl}:offsets", "t:1", 42).execute()
        server.stop()  # a clean shutdown: the file is complete
        server.start()
        admin = redis_client(server.url, 5.0, principal=ADMIN)
        assert admin.hgetall("ldp:{acl}:outcomes") == {b"accepted": b"7"}
        assert admin.get("ldp:{acl}:seen") == b"ab"
        assert admin.hgetall("ldp:{acl}:offsets") == {b"t:0": b"41", b"t:1": b"42"}
        assert "CRITICAL" not in (server.dir / "redis.log").read_text()
    finally:
        server.stop()
