"""The edge against slow and idle clients: half-sent headers are closed after the idle timeout, a body that does
not arrive in time is 408 (nothing counted), and connections beyond the cap are 503 and closed while the edge keeps
serving everyone else."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_support import EdgeProcess, post, report_body, running_edge
from pipeline_support import Collection, topic_messages

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.edge.devices import DeviceRegistry
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration
IDLE_S = 1.0
CAP = 6


@pytest.fixture
def impatient_edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    """An edge that closes idle connections after 1 s and waits 1 s for a body."""
    yield from running_edge(tmp_path, "--idle-timeout-s", str(IDLE_S), "--body-timeout-s", str(IDLE_S))


@pytest.fixture
def capped_edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    """An edge that takes at most CAP connections at once."""
    yield from running_edge(tmp_path, "--max-connections", str(CAP))


@pytest.fixture
def device(enrolled: DeviceRegistry, collection: Collection) -> Credential:
    return enrolled.enroll(collection.spec.name, 1)[0]


def closed_by_server(sock: socket.socket, within_s: float) -> float:
    """Seconds until the server closed `sock` (reading whatever it sent first); fails after `within_s`."""
    sock.settimeout(within_s)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionError:  # closed with bytes of ours unread: a reset
        pass
    return time.monotonic() - started


def healthy(url: str) -> bool:
    """/healthz answered 200 (False when refused or closed)."""
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=20) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return False


def test_half_sent_headers_are_closed_after_the_idle_timeout(impatient_edge: EdgeProcess) -> None:
    with socket.create_connection(("127.0.0.1", impatient_edge.port)) as silent, \
            socket.create_connection(("127.0.0.1", impatient_edge.port)) as trickling:
        trickling.sendall(b"POST /v1/collections/x/reports HTTP/1.1\r\nHost: edge\r\n")
        assert closed_by_server(silent, 20) < 20
        trickling.setblocking(False)
        started = time.monotonic()
        while True:  # a header line every quarter of the idle timeout does not keep the connection
            assert time.monotonic() - started < 10 * IDLE_S, "a trickle of header lines kept the connection"
            try:
                if trickling.recv(4096) == b"":
                    break
            except BlockingIOError:
                pass
            except ConnectionError:  # closed with our trickled bytes unread: a reset
                break
            try:
                trickling.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            time.sleep(IDLE_S / 4)
    assert healthy(impatient_edge.url)


def test_a_body_slower_than_its_timeout_is_408_and_nothing_is_counted(collection: Collection,
                                                                      impatient_edge: EdgeProcess,
                                                                      device: Credential) -> None:
    body = report_body(collection.spec, device)
    path = f"/v1/collections/{collection.spec.name}/reports"
    head = (f"POST {path} HTTP/1.1\r\nHost: edge\r\nContent-Type: application/msgpack\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Authorization: {authorization(device.device, device.key, 'POST', path, body, now_ms())}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", impatient_edge.port)) as sock:
        sock.sendall(head.encode() + body[:3])
        sock.settimeout(20)
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 408 and b"body_timeout" in response.read()
        assert response.getheader("Connection") == "close"
        assert closed_by_server(sock, 20) < 20
    assert sum(len(m) for m in topic_messages(collection.cfg.bootstrap, collection.spec.topic).values()) == 0
    status, answer, _ = post(impatient_edge.url, device, body)  # the same report, sent in time: counted once
    assert (status, answer["accepted"]) == (200, 1)


def test_connections_beyond_the_cap_are_503_and_closed_while_the_others_are_served(
        collection: Collection, capped_edge: EdgeProcess, device: Credential) -> None:
    held = [socket.create_connection(("127.0.0.1", capped_edge.port)) for _ in range(CAP)]
    try:
        with socket.create_connection(("127.0.0.1", capped_edge.port)) as extra:
            extra.settimeout(20)
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 2" in answer
            assert b"X-Request-Id: " in answer and b'"request_id"' in answer and b"too_many_connections" in answer
        # the connections the edge holds still get answers
        body = report_body(collection.spec, device)
        path = f"/v1/collections/{collection.spec.name}/reports"
        conn = http.client.HTTPConnection("127.0.0.1", capped_edge.port, timeout=20)
        conn.sock = held.pop()
        conn.request("POST", path, body, {"Content-Type": "application/msgpack", "Authorization": authorization(
            device.device, device.key, "POST", path, body, now_ms())})
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 20  # the closed connections leave the count
    while not healthy(capped_edge.url):
        assert time.monotonic() < deadline
        time.sleep(0.1)
