"""Running services side by side, as users do: aggregators that join, leave and are killed on one collection count
every report once; no worker or edge process outlives its supervisor; every process stops within a few seconds of
SIGTERM with Kafka and Redis gone; a second `ldp up` changes nothing that running services depend on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from edge_support import EdgeProcess, free_port, post, report_body
from pipeline_support import Collection, send_in_background

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.contract.clock import now_ms
from ldpstream.edge.devices import DeviceRegistry
from ldpstream.runtime.process import pid_alive
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.supervisor import STOP_GRACE_S
from ldpstream.runtime.tokens import Scope, TokenStore
from ldpstream.services import KafkaService, RedisService

pytestmark = pytest.mark.integration

LDP = [sys.executable, "-m", "ldpstream"]


def children(pid: int) -> list[int]:
    """The pids of a process's children (Linux)."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still alive after `seconds` (as soon as none is: [])."""
    deadline = time.monotonic() + seconds
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


@contextmanager
def supervisors(tmp_path: Path, commands: dict[str, list[str]], workers: int | dict[str, int]) -> Iterator[dict[
        str, tuple[subprocess.Popen[bytes], list[int]]]]:
    """`ldp` commands each supervising `workers` children (or workers[name]): name -> (supervisor, its children's
    pids), once every child runs; whatever is left is killed afterwards."""
    wanted = workers if isinstance(workers, dict) else dict.fromkeys(commands, workers)
    procs = {name: subprocess.Popen([*LDP, *argv], stdout=(tmp_path / f"{name}.log").open("wb"),
                                    stderr=subprocess.STDOUT, start_new_session=True)
             for name, argv in commands.items()}
    try:
        deadline = time.monotonic() + 120
        while any(len(children(p.pid)) < wanted[n] for n, p in procs.items()) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs.values()), [(tmp_path / f"{n}.log").read_text()
                                                                   for n in procs]
            time.sleep(0.2)
        yield {name: (p, children(p.pid)) for name, p in procs.items()}
    finally:
        for p in procs.values():
            for pid in [*children(p.pid), p.pid]:
                if pid_alive(pid):
                    os.killpg(pid, signal.SIGKILL)
            p.wait()


def test_workers_of_one_group_and_of_another_coming_and_going_count_every_report_once(collection: Collection) -> None:
    """Three workers share the partitions; one leaves (SIGTERM) and another joins; one is SIGKILLed and replaced;
    meanwhile a worker of a second consumer group reads every partition too (`ldp demo` beside a running `ldp
    aggregate`: before, the two stopped each other with "micro-batch not applied after 8 rounds" and set genuine
    reports aside as poison). Every report is counted once and nothing is set aside."""
    n = 200_000
    fleet = send_in_background(collection, n, rate=20_000, seed=11)
    workers = [collection.start_worker() for _ in range(3)]
    other = start_worker(f"{collection.group}-other", env={"KAFKA_BOOTSTRAP": collection.cfg.bootstrap,
                                                            "REDIS_URL": collection.cfg.redis})
    try:
        time.sleep(3)
        stop_worker(workers[0])  # a graceful leave...
        workers[0] = collection.start_worker()  # ...and a join
        time.sleep(3)
        os.killpg(workers[1].pid, signal.SIGKILL)  # a member gone without a word: its partitions wait for its session
        workers[1].wait()
        workers[1] = collection.start_worker()
        fleet.join()
        assert collection.wait_accepted(n, 240, lambda: all(w.poll() is None for w in [*workers, other])) == n
        time.sleep(2)  # what the second group still has in hand: applied already, it must apply nothing again
        assert [w.poll() for w in [*workers, other]] == [None] * 4, "a worker exited (gave up or crashed)"
    finally:
        for w in [*workers, other]:
            stop_worker(w)
    assert collection.store.outcomes(collection.spec.name) == {"accepted": n}  # once each; nothing set aside


def test_no_worker_or_edge_process_outlives_its_sigkilled_supervisor(collection: Collection, tmp_path: Path) -> None:
    commands = {"aggregate": ["aggregate", "--workers", "2", "--group", collection.group],
                "edge": ["edge", "--port", str(free_port()), "--workers", "2"]}
    with supervisors(tmp_path, commands, 2) as running:
        time.sleep(2.0)
        for proc, _ in running.values():
            proc.kill()  # (its children are in process groups of their own: the kill reaches it only)
        for name, (proc, pids) in running.items():
            proc.wait()
            assert gone_within(pids, STOP_GRACE_S + 2.0) == [], f"orphans of `ldp {name}`"


def test_a_second_ldp_up_changes_nothing_a_running_api_and_edge_depend_on(
        collection: Collection, edge: EdgeProcess, enrolled: DeviceRegistry, tmp_path: Path) -> None:
    """Before, `ldp up` reloaded Redis's users (ACL LOAD), which drops every client's connection: the next request
    of a running API answered 503 and of a running edge 500."""
    cfg = collection.cfg
    token = TokenStore(redis_client(cfg.redis)).issue([Scope.READ], "it", now_ms(), ttl_ms=600_000).token
    port = free_port()
    api = subprocess.Popen([*LDP, "serve", "--port", str(port)], stdout=(tmp_path / "api.log").open("wb"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    devices = iter(enrolled.enroll(collection.spec.name, 2))

    def api_status() -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/collections",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    def edge_status() -> int:
        credential = next(devices)
        return post(edge.url, credential, report_body(collection.spec, credential))[0]

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if api_status() == 200:
                    break
            except OSError:
                time.sleep(0.2)
        assert (api_status(), edge_status()) == (200, 200)
        again = subprocess.run([*LDP, "up"], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        assert (api_status(), edge_status()) == (200, 200)
    finally:
        stop_worker(api)


def test_every_process_stops_within_seconds_of_sigterm_with_kafka_and_redis_gone(
        collection: Collection, tmp_path: Path) -> None:
    """Kafka and Redis stop answering (SIGSTOP: connections hang rather than fail) under a running `ldp aggregate`,
    `ldp edge`, `ldp serve` and `ldp shuffle`; SIGTERM stops each, and the supervisors' children, within the grace
    (before, an aggregator waited on them for over 25 s)."""
    services = [KafkaService(collection.cfg), RedisService(collection.cfg)]
    if not all(s.managed for s in services):
        pytest.skip("Kafka or Redis is external: this test cannot stop it")
    commands = {"aggregate": ["aggregate", "--group", collection.group], "edge": ["edge", "--port", str(free_port())],
                "serve": ["serve", "--port", str(free_port())], "shuffle": ["shuffle"]}
    with supervisors(tmp_path, commands, {"aggregate": 1, "edge": 1, "serve": 0, "shuffle": 0}) as running:
        send_in_background(collection, 2000, seed=12).join()
        assert collection.wait_accepted(2000, 120) == 2000  # the worker is in its consumer group, working
        frozen = [pid for s in services if (pid := s.running_pid()) is not None]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(1.0)
            for proc, _ in running.values():
                proc.send_signal(signal.SIGTERM)
            pids = [pid for proc, kids in running.values() for pid in [proc.pid, *kids]]
            left = gone_within(pids, STOP_GRACE_S + 4.0)
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        command = {pid: name for name, (proc, kids) in running.items() for pid in [proc.pid, *kids]}
        assert left == [], f"ignored SIGTERM with Kafka and Redis gone: {[command[pid] for pid in left]} (or a child)"
