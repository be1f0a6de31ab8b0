"""The edge against hostile requests: every refusal has its status and reason, and nothing refused reaches Kafka."""

from __future__ import annotations

import gzip
import http.client
import json
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from edge_support import EdgeProcess, free_port, post, report_body, running_edge
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_support import Collection, published_collection, topic_messages

from ldpstream.contract.auth import Credential
from ldpstream.contract.clock import now_ms
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.wire import decode
from ldpstream.edge.devices import DeviceRegistry
from ldpstream.edge.keyring import Keyring, generation_of
from ldpstream.edge.processes import start_edge, stop_edge, wait_live
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration
HOUR_MS = 3600 * 1000


def rows_in_kafka(collection: Collection) -> list[int]:
    """The device pseudonyms of every report in the collection's topic."""
    return [int(d) for msgs in topic_messages(collection.cfg.bootstrap, collection.spec.topic).values()
            for m in msgs for d in decode(m.value).devices]


@pytest.fixture(scope="module")
def collections(live_services: Settings, request: pytest.FixtureRequest) -> Iterator[Iterator[Collection]]:
    """A collection of its own for each test of the module, all published before the module's edge starts."""
    tests = sum(getattr(item, "module", None) is request.module for item in request.session.items)
    with ExitStack() as stack:
        yield iter([stack.enter_context(published_collection(live_services)) for _ in range(tests)])


@pytest.fixture
def collection(collections: Iterator[Collection]) -> Collection:
    return next(collections)


@pytest.fixture(scope="module")
def edge(collections: Iterator[Collection], tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeProcess]:
    """One edge process for the module's tests (each with its own collection, devices and so rate limits): it reads
    every published spec when it starts (later, on a miss, at most every 2 s)."""
    yield from running_edge(tmp_path_factory.mktemp("edge"))


@pytest.fixture
def device(enrolled: DeviceRegistry, collection: Collection) -> Credential:
    return enrolled.enroll(collection.spec.name, 1)[0]


def test_a_good_report_is_acknowledged_once_kafka_has_it(collection: Collection, edge: EdgeProcess,
                                                         device: Credential) -> None:
    status, answer, headers = post(edge.url, device, report_body(collection.spec, device))
    assert (status, answer["accepted"], answer["stored"]) == (200, 1, "kafka") and headers["X-Request-Id"]
    assert rows_in_kafka(collection) == [device_pseudonym(collection.spec.name, device.device)]


def test_credentials_missing_wrong_or_revoked_are_401_and_nothing_is_sent(
        collection: Collection, edge: EdgeProcess, enrolled: DeviceRegistry, device: Credential) -> None:
    body = report_body(collection.spec, device)
    wrong_key = replace(device, key=secrets.token_bytes(32))
    unknown = replace(device, device="never-enrolled")
    for credential, headers in ((None, {}), (wrong_key, {}), (unknown, {}),
                                (device, {"Authorization": "Bearer xyz"})):
        status, answer, _ = post(edge.url, credential, body, headers=headers, path=(
            f"/v1/collections/{collection.spec.name}/reports"))
        assert (status, answer["reason"]) == (401, "unauthorized"), answer
    status, answer, _ = post(edge.url, device, body, timestamp_ms=now_ms() - 10 * 60 * 1000)
    assert status == 401 and "clock skew" in answer["error"]
    assert enrolled.revoke(collection.spec.name, [device.device]) == 1
    status, answer, _ = post(edge.url, device, body)
    assert (status, answer["reason"]) == (401, "unauthorized")
    assert rows_in_kafka(collection) == []


def test_a_replayed_request_is_401(collection: Collection, edge: EdgeProcess, device: Credential) -> None:
    body, when = report_body(collection.spec, device), now_ms()
    assert post(edge.url, device, body, timestamp_ms=when)[0] == 200
    status, answer, _ = post(edge.url, device, body, timestamp_ms=when)
    assert (status, answer["reason"]) == (401, "replayed")
    assert len(rows_in_kafka(collection)) == 1


def test_a_body_naming_another_device_is_403(collection: Collection, edge: EdgeProcess, device: Credential) -> None:
    other = device_pseudonym(collection.spec.name, "someone-else")
    status, answer, _ = post(edge.url, device, report_body(collection.spec, device, pseudonym=other))
    assert (status, answer["reason"]) == (403, "wrong_device")
    assert rows_in_kafka(collection) == []


def test_a_window_already_used_is_409_and_an_outbox_keeps_its_new_reports(
        collection: Collection, edge: EdgeProcess, device: Credential) -> None:
    now = now_ms()
    assert post(edge.url, device, report_body(collection.spec, device, [now]))[0] == 200
    status, answer, _ = post(edge.url, device, report_body(collection.spec, device, [now], seed=1))
    assert (status, answer["reason"]) == (409, "duplicate")
    # an outbox retried after a lost answer: the used window is dropped, the previous window's report accepted
    earlier = now // HOUR_MS * HOUR_MS - 1
    status, answer, _ = post(edge.url, device, report_body(collection.spec, device, [earlier, now]))
    assert (status, answer["accepted"], answer["duplicates"]) == (200, 1, [1])
    assert answer["verdicts"] == ["admitted", "duplicate"]
    # two for one window already used: the second refused alone in the request, the first at admission
    status, answer, _ = post(edge.url, device, report_body(collection.spec, device, [now + 1, now + 2]))
    assert (status, answer["reason"], answer["verdicts"]) == (409, "duplicate", ["duplicate", "duplicate"])
    assert len(rows_in_kafka(collection)) == 2


@pytest.mark.parametrize("when, reason", [(lambda n: n + 3600_000, "future_timestamp"),
                                          (lambda n: n - 3 * 3600_000, "stale_timestamp")])
def test_report_times_outside_the_window_are_400(collection: Collection, edge: EdgeProcess, device: Credential,
                                                  when: object, reason: str) -> None:
    body = report_body(collection.spec, device, [when(now_ms())])  # type: ignore[operator]
    status, answer, _ = post(edge.url, device, body)
    assert (status, answer["reason"]) == (400, reason)


def test_unknown_version_404_json_form_gzip_and_size_limits(collection: Collection, edge: EdgeProcess,
                                                            enrolled: DeviceRegistry) -> None:
    first, second, third = enrolled.enroll(collection.spec.name, 3)
    status, answer, _ = post(edge.url, first, json.dumps({"spec_version": 99, "reports": [
        {"timestamp_ms": now_ms(), "attributes": {}}]}).encode(), "application/json")
    assert (status, answer["reason"]) == (404, "unknown_collection")
    status, answer, _ = post(edge.url, first, gzip.compress(report_body(collection.spec, first)),
                             headers={"Content-Encoding": "gzip"})
    assert status == 200, answer
    bomb = gzip.compress(b"\0" * 64 * 2**20)  # 64 MiB of zeros in 64 KiB
    status, answer, _ = post(edge.url, second, bomb, headers={"Content-Encoding": "gzip"})
    assert (status, answer["reason"]) == (413, "too_large")
    status, _, _ = post(edge.url, second, b"\0" * (2 * 2**20))
    assert status == 413
    connection = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    connection.putrequest("POST", f"/v1/collections/{collection.spec.name}/reports")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    connection.send(b"0\r\n\r\n")
    assert connection.getresponse().status == 411
    status, answer, _ = post(edge.url, third, b"{}", "text/plain")
    assert status == 415
    assert len(rows_in_kafka(collection)) == 1


def test_more_requests_than_the_rate_limit_are_429_with_retry_after(collection: Collection, edge: EdgeProcess,
                                                                     device: Credential) -> None:
    body = report_body(collection.spec, device)
    statuses = [post(edge.url, device, body)[0:3:2] for _ in range(30)]
    limited = [headers for status, headers in statuses if status == 429]
    assert limited and all(h["Retry-After"] == "1" for h in limited)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_bodies_never_crash_the_edge(collection: Collection, edge: EdgeProcess, device: Credential,
                                            data: st.DataObject) -> None:
    valid = report_body(collection.spec, device)
    kind = data.draw(st.sampled_from(["random", "mutated", "truncated", "json", "gzip"]))
    if kind == "random":
        body = data.draw(st.binary(max_size=4096))
    elif kind == "mutated":
        body = bytearray(valid)
        for _ in range(data.draw(st.integers(1, 8))):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
        body = bytes(body)
    elif kind == "truncated":
        body = valid[:data.draw(st.integers(0, len(valid) - 1))]
    elif kind == "json":
        body = json.dumps(data.draw(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(),
                                                 lambda c: st.lists(c) | st.dictionaries(st.text(), c),
                                                 max_leaves=20))).encode()
    else:
        body = gzip.compress(data.draw(st.binary(max_size=2048)))[:data.draw(st.integers(1, 2100))]
    content_type = "application/json" if kind == "json" else "application/msgpack"
    headers = {"Content-Encoding": "gzip"} if kind == "gzip" else {}
    status, answer, _ = post(edge.url, device, body, content_type, headers=headers)
    assert status < 500, answer
    assert edge.proc.poll() is None


def test_the_json_form_of_an_outbox_is_accepted_like_its_envelope(collection: Collection, edge: EdgeProcess,
                                                                  device: Credential) -> None:
    now = now_ms()
    batch = decode(report_body(collection.spec, device, [now // HOUR_MS * HOUR_MS - 1, now]))
    reports: list[dict[str, object]] = [{"timestamp_ms": int(t), "attributes": {}} for t in batch.timestamps_ms]
    for block in batch.attributes:
        name = collection.spec.attributes[block.attribute].name
        for position, row in enumerate(block.rows.tolist()):
            reports[row]["attributes"][name] = {  # type: ignore[index]
                column: values.reshape(len(block.rows), -1)[position].tolist() for column, values in
                block.reports.items()}
    body = json.dumps({"spec_version": collection.spec.version, "reports": reports}).encode()
    status, answer, _ = post(edge.url, device, body, "application/json")
    assert (status, answer["accepted"]) == (200, 2), answer
    assert rows_in_kafka(collection) == [device_pseudonym(collection.spec.name, device.device)] * 2


@pytest.mark.usefixtures("enrolled")  # its cleanup of the collection's edge keys
def test_a_rotated_master_key_keeps_old_devices_until_their_generation_is_retired(
        collection: Collection, tmp_path: Path) -> None:
    """A running edge: devices of generation 0 and, after `rotate`, of generation 1 are accepted; once generation
    0 is retired its devices are 401 (within the keyring's re-read second) and generation 1's still accepted."""
    keyring = Keyring.create(tmp_path / "master.key")  # this test's own master keys, not the suite's
    registry = DeviceRegistry(redis_client(collection.cfg.redis), keyring)
    name = collection.spec.name
    port = free_port()
    proc = start_edge(port, tmp_path / "spool", log_file=tmp_path / "edge.log",
                      env={"LDP_EDGE_KEY_FILE": str(keyring.path)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_live(url, proc, probe="/readyz")
        old = registry.enroll(name, 2)
        keyring.rotate()
        new = registry.enroll(name, 2)
        assert {generation_of(c.device) for c in old} == {0} and {generation_of(c.device) for c in new} == {1}
        for credential in (old[0], new[0]):
            assert post(url, credential, report_body(collection.spec, credential))[0] == 200
        keyring.retire(0)
        time.sleep(1.2)
        status, answer, _ = post(url, old[1], report_body(collection.spec, old[1]))
        assert (status, answer["reason"]) == (401, "unauthorized") and "generation 0" in answer["error"]
        assert post(url, new[1], report_body(collection.spec, new[1]))[0] == 200
        assert sorted(rows_in_kafka(collection)) == sorted(device_pseudonym(name, c.device)
                                                           for c in (old[0], new[0], new[1]))
    finally:
        stop_edge(proc)
