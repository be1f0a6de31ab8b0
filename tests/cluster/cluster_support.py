"""Cluster test support: workers that are restarted when they exit (as their supervisor would), nodes killed and
started again, the Redis Cluster's map of which node serves a key."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline_support import Collection, Fleet

from ldpstream.aggregator.processes import stop_worker
from ldpstream.runtime.access import ADMIN
from ldpstream.runtime.process import read_pid
from ldpstream.runtime.redis import OUTAGES, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.services import KafkaService, RedisService
from ldpstream.simulator.simulator import SimulationResult


class Workers:
    """`n` aggregator workers of a collection's group, each logging to `logs/worker-<i>.log`; `supervise` starts
    again any that exited (a worker exits on an unexpected error and its supervisor restarts it)."""

    def __init__(self, c: Collection, n: int, logs: Path) -> None:
        self.c, self.logs = c, logs
        self.procs = [self._start(i) for i in range(n)]
        self.restarts = 0

    def _start(self, i: int) -> subprocess.Popen[bytes]:
        return self.c.start_worker(self.logs / f"worker-{i}.log")

    def supervise(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.restarts += 1
                self.procs[i] = self._start(i)

    def restart(self, i: int) -> None:
        """Stop worker `i` cleanly (SIGTERM) and start it again."""
        stop_worker(self.procs[i])
        self.procs[i] = self._start(i)

    def stop(self) -> None:
        for proc in self.procs:
            stop_worker(proc)

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("worker-*.log")))


def accepted(c: Collection) -> int:
    """The reports accepted so far; -1 while the store's slot fails over."""
    try:
        return c.accepted()
    except OUTAGES:
        return -1


def wait_accepted(c: Collection, target: int, timeout_s: float, workers: Workers) -> int:
    """Poll until `target` reports are accepted, restarting workers that exit; the count reached."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        workers.supervise()
        if (n := accepted(c)) >= target:
            return n
        time.sleep(0.2)
    return accepted(c)


def stream_through(c: Collection, workers: Workers, fleet: Fleet, devices: int, fault: Callable[[], None],
                   started: int) -> SimulationResult:
    """Once `started` reports are accepted, run `fault` while `fleet` streams to `workers`; then every one of the
    `devices` reports must be accepted exactly once (and nothing more once the workers have exited: a replay
    counted twice would show). The fleet's result."""
    try:
        assert wait_accepted(c, started, 240, workers) >= started, "the stream did not start"
        fault()
        result = fleet.join(400)
        assert result.reports == devices
        assert wait_accepted(c, devices, 300, workers) == devices
    finally:
        workers.stop()
    assert c.store.outcomes(c.spec.name) == {"accepted": devices}
    return result


def kill(pidfile: Path) -> None:
    """SIGKILL a node's process group (no shutdown, no flush) and wait until it is gone."""
    pid = read_pid(pidfile)
    assert pid is not None, f"nothing runs for {pidfile}"
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while read_pid(pidfile) is not None:
        assert time.monotonic() < deadline, f"{pidfile}'s process did not exit"
        time.sleep(0.05)


def kafka_node(cfg: Settings, i: int) -> KafkaService:
    return KafkaService(cfg, i)


def redis_node(cfg: Settings, i: int) -> RedisService:
    return RedisService(cfg, i)


@dataclass(frozen=True)
class Node:
    """A Redis Cluster node as CLUSTER NODES shows it."""

    id: str
    port: int
    primary: bool
    failed: bool
    primary_id: str
    slots: tuple[tuple[int, int], ...]


def cluster_nodes(cfg: Settings, via: int) -> list[Node]:
    """The cluster's nodes as node `via` (an index) sees them."""
    raw = redis_client(redis_node(cfg, via).address, 5.0, principal=ADMIN).execute_command("CLUSTER", "NODES")
    nodes = []
    for line in (raw.decode() if isinstance(raw, bytes) else str(raw)).splitlines():
        f = line.split()
        ranges = tuple((int(a), int(b or a)) for a, _, b in (s.partition("-") for s in f[8:] if not s.startswith("[")))
        nodes.append(Node(f[0], int(f[1].split("@")[0].rsplit(":", 1)[1]), "master" in f[2], "fail" in f[2], f[3],
                          ranges))
    return nodes


def serving(cfg: Settings, key: str, via: int) -> tuple[int, int | None]:
    """(primary, replica): the indexes of the nodes that serve `key`'s slot, as node `via` sees them (replica None
    while the primary has none)."""
    slot = int(redis_client(redis_node(cfg, via).address, 5.0, principal=ADMIN).execute_command(
        "CLUSTER", "KEYSLOT", key))
    nodes = cluster_nodes(cfg, via)
    primary = next(n for n in nodes if n.primary and any(a <= slot <= b for a, b in n.slots))
    replica = next((n for n in nodes if not n.primary and n.primary_id == primary.id), None)
    return cfg.redis_ports.index(primary.port), None if replica is None else cfg.redis_ports.index(replica.port)
