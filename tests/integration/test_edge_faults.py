"""The edge when Kafka goes away and when the edge itself is killed: nothing acknowledged is lost or counted twice.

These tests stop and start a Kafka broker of their own (the shared one stays up for everyone else); Redis is the
shared one, under collection names of their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from edge_support import free_port
from fault_support import wait_for

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.auth import Credential
from ldpstream.contract.spec import CollectionSpec, load_spec
from ldpstream.edge.devices import DeviceRegistry, edge_keys
from ldpstream.edge.keyring import Keyring
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.services import KafkaService
from ldpstream.simulator.edge_client import FleetAnswers, fleet_requests, post_all

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_kafka(live_services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaService]:
    """A broker of this module's own (the shared broker's jar cache, its own ports and data)."""
    state = tmp_path_factory.mktemp("own-kafka")
    cfg = replace(live_services, state_dir=state, kafka_port=free_port(), kafka_controller_port=free_port(),
                  kafka_bootstrap=None, kafka_heap="384m")
    lib = f"lib-{cfg.kafka_version}"
    (state / "kafka").mkdir()
    (state / "kafka" / lib).symlink_to(live_services.state_dir / "kafka" / lib)
    kafka = KafkaService(cfg)
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture
def setup(own_kafka: KafkaService, live_services: Settings, tmp_path: Path) -> Iterator[tuple[CollectionSpec, dict]]:
    """A collection published on the own broker, and the environment its processes run with."""
    env = {"KAFKA_BOOTSTRAP": own_kafka.address}
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(name=f"itf-{uuid.uuid4().hex[:10]}")
    old = os.environ.get("KAFKA_BOOTSTRAP")
    os.environ["KAFKA_BOOTSTRAP"] = own_kafka.address  # the specs topic is looked up from the environment
    try:
        publish_spec(spec, own_kafka.address)
    finally:
        os.environ.pop("KAFKA_BOOTSTRAP") if old is None else os.environ.__setitem__("KAFKA_BOOTSTRAP", old)
    yield spec, env
    client = redis_client(live_services.redis)
    RedisStore(live_services.redis).delete_collection(spec.name)
    keys = list(client.scan_iter(edge_keys(spec.name), count=10_000))
    if keys:
        client.delete(*keys)


def credentials(live_services: Settings, spec: CollectionSpec, n: int) -> list[Credential]:
    registry = DeviceRegistry(redis_client(live_services.redis), Keyring.create(live_services.edge_key))
    return [c for c in registry.enroll(spec.name, n)]


def wait_counted(live_services: Settings, spec: CollectionSpec, target: int, timeout_s: float,
                 exact: bool = True) -> int:
    """The collection's accepted reports once `target` are (or time ran out); with `exact`, a second later."""
    store = RedisStore(live_services.redis)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and store.outcomes(spec.name).get("accepted", 0) < target:
        time.sleep(0.2)
    if exact:
        time.sleep(1.0)  # nothing more arrives: exact, not at least
    return store.outcomes(spec.name).get("accepted", 0)


def readyz(url: str) -> dict:
    """/readyz's answer (200 or 503)."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def wait_ready(url: str, ready: bool, drained: bool = False, timeout_s: float = 60.0) -> dict:
    """/readyz's answer once it says `ready` (and, with `drained`, an empty spool); AssertionError if it does not
    within the time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = readyz(url)
        if answer["ready"] == ready and (not drained or answer["spool_bytes"] == 0):
            return answer
        time.sleep(0.1)
    raise AssertionError(f"/readyz did not turn {ready} within {timeout_s:g} s: {answer}")


def test_kafka_down_while_devices_send_every_acknowledged_report_counted_once(
        live_services: Settings, own_kafka: KafkaService, setup: tuple[CollectionSpec, dict], tmp_path: Path) -> None:
    spec, env = setup
    devices = 3000
    requests, _ = fleet_requests(spec, credentials(live_services, spec, devices), seed=11)
    port = free_port()
    edge = start_edge(port, tmp_path / "spool", "--delivery-timeout-ms", "2000", env=env,
                      log_file=tmp_path / "edge.log")
    worker = start_worker(f"ldp-aggregator-{spec.name}", env=env)
    url = f"http://127.0.0.1:{port}"
    answers: list[FleetAnswers] = []
    try:
        wait_live(url, edge)
        sender = threading.Thread(target=lambda: answers.append(asyncio.run(post_all(url, requests, 8))))
        sender.start()
        assert wait_counted(live_services, spec, 1, 120, exact=False) > 0  # mid-stream, not mid-start-up
        own_kafka.stop()
        # down until the edge has given up on Kafka for some requests (--delivery-timeout-ms) and spooled them
        wait_for(lambda: readyz(url)["spool_bytes"] > 0, 60, "the edge to spool")
        own_kafka.start()
        sender.join(240)
        assert answers, "the devices did not finish"
        statuses = answers[0].statuses
        assert set(statuses) <= {200, 202} and answers[0].acknowledged == devices, statuses
        assert statuses.get(202, 0) > 0, "nothing was spooled: the outage came too late"
        assert wait_counted(live_services, spec, devices, 180) == devices
    finally:
        stop_worker(worker)
        stop_edge(edge)


def test_sigkill_of_an_edge_with_a_non_empty_spool_loses_nothing_acknowledged(
        live_services: Settings, own_kafka: KafkaService, setup: tuple[CollectionSpec, dict], tmp_path: Path) -> None:
    spec, env = setup
    devices = 200
    requests, _ = fleet_requests(spec, credentials(live_services, spec, devices), seed=12)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ("--delivery-timeout-ms", "1500")
    edge = start_edge(port, tmp_path / "spool", *args, env=env, log_file=tmp_path / "edge.log")
    worker = None
    try:
        wait_live(url, edge)
        assert asyncio.run(post_all(url, requests[:1], 1)).statuses == {200: 1}  # the edge has read the spec
        own_kafka.stop()
        answers = asyncio.run(post_all(url, requests[1:], 64))  # each answered after the delivery timeout
        assert answers.statuses == {202: devices - 1}  # every one fsynced in the spool
        assert any((tmp_path / "spool").glob("*.seg"))
        assert wait_ready(url, False)["reasons"] == ["Kafka unreachable"]
        os.killpg(edge.pid, signal.SIGKILL)
        edge.wait()
        own_kafka.start()
        edge = start_edge(port, tmp_path / "spool", *args, env=env, log_file=tmp_path / "edge.log")
        wait_live(url, edge)
        wait_ready(url, True, drained=True)
        worker = start_worker(f"ldp-aggregator-{spec.name}", env=env)
        assert wait_counted(live_services, spec, devices, 180) == devices
    finally:
        if worker is not None:
            stop_worker(worker)
        stop_edge(edge)
