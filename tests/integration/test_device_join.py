"""Devices join on their own and trust no collector: the real edge, Kafka and Redis, the real SDK
(`Device.join`), and a tampering path in between where the network is the attacker's."""

from __future__ import annotations

import base64
import errno
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from edge_support import EdgeProcess, free_port, running_edge
from pipeline_support import Collection, published_collection, topic_messages

from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.pseudonym import device_pseudonym
from ldpstream.contract.signatures import block_from_header, block_header, pointer_message, sign_block
from ldpstream.device import Device
from ldpstream.device.edge_api import EdgeError
from ldpstream.device.ledger import PrivacyLedger
from ldpstream.device.perturb import RecordError
from ldpstream.device.sdk import SpecRefused
from ldpstream.device.state import DeviceState, StateError
from ldpstream.edge.devices import devices_key, devices_keys
from ldpstream.edge.join import uses_key
from ldpstream.runtime.join_keys import load_token_key, pinned_keys, pointer_key_paths
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import load_signing_key, new_private_key
from ldpstream.runtime.specs import publish_spec

pytestmark = pytest.mark.integration

RECORD = {"battery_level": 71.0, "battery_temperature": 30.0, "memory_used": 5000.0, "screen_on_minutes": 100.0,
          "apps_running": 10.0, "brightness_level": "low", "location_enabled": "on", "display_mode": "dark",
          "network_type": "wifi", "os_version": "14"}


def token_for(cfg: Settings, *names: str, uses: int = 10, lifetime_ms: int = 3_600_000) -> str:
    now = now_ms()
    return mint(load_token_key(cfg), new_token(list(names), uses, now, now + lifetime_ms))


def enrolled_devices(cfg: Settings, name: str) -> int:
    client = redis_client(cfg.redis)
    return sum(client.hlen(key) for key in devices_keys(name))


def enrol(url: str, token: str, collection: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{url}/v1/enroll", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"token": token, "collection": collection}).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def keys(live_services: Settings) -> dict[str, Any]:
    return pinned_keys(live_services)


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    """An edge of its own whose per-address enrolment limit every test here (all from 127.0.0.1) stays under; the
    flood test starts one with a low limit."""
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


def test_a_device_joins_verifies_the_spec_and_its_report_reaches_kafka_once(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tmp_path: Path) -> None:
    cfg = collection.cfg
    device = Device.join(edge.url, collection.spec.name, token_for(cfg, collection.spec.name), keys,
                         state_dir=tmp_path / "phone")
    assert device.verdict == {"accepted": True, "code": "", "reason": ""}
    assert device.spec.content_hash() == collection.spec.content_hash()
    device.report(RECORD)
    assert device.flush() == 1
    assert device.transport is not None and device.transport.current_version == collection.spec.version
    pseudonym = device_pseudonym(collection.spec.name, device.transport.credential.device)
    rows = [m for msgs in topic_messages(cfg.bootstrap, collection.spec.topic).values() for m in msgs]
    assert len(rows) == 1 and pseudonym.to_bytes(8, "little") in rows[0].value
    again = Device.join(edge.url, collection.spec.name, None, keys, state_dir=tmp_path / "phone")  # a restart
    assert again.transport is not None and again.transport.credential == device.transport.credential
    assert enrolled_devices(cfg, collection.spec.name) == 1


def test_tokens_that_may_not_enrol_enrol_nothing(collection: Collection, edge: EdgeProcess) -> None:
    cfg, name = collection.cfg, collection.spec.name
    good = token_for(cfg, name, uses=2)
    stranger = mint(new_private_key(), new_token([name], 5, now_ms(), now_ms() + 60_000))
    cases = {"malformed": "ldpet1.not-a-token", "expired": token_for(cfg, name, lifetime_ms=1),
             "another collection": token_for(cfg, "somewhere-else"), "an unknown key": stranger,
             "no token at all": ""}
    for case, token in cases.items():
        status, answer = enrol(edge.url, token, name)
        assert (status, answer["reason"]) == (403, "bad_token"), case
    assert [enrol(edge.url, good, name)[0] for _ in range(2)] == [201, 201]
    status, answer = enrol(edge.url, good, name)  # over-used: a replay after its last use
    assert (status, answer["reason"]) == (403, "token_used_up")
    assert enrolled_devices(cfg, name) == 2
    token_id = json.loads(base64.urlsafe_b64decode(good.split(".")[1] + "=="))["id"]
    assert int(redis_client(cfg.redis).get(uses_key(token_id))) == 2  # the record: how many, never which


def test_bodies_that_are_not_enrolments_are_400_and_enrol_nothing(collection: Collection, edge: EdgeProcess) -> None:
    for body in (b"", b"{", b"[]", b'{"token": 1, "collection": "x"}', b'{"token": "t"}', b"\xff" * 100):
        request = urllib.request.Request(f"{edge.url}/v1/enroll", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400
    assert enrolled_devices(collection.cfg, collection.spec.name) == 0


def test_an_enrolment_flood_from_one_address_is_429(collection: Collection, tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    token = token_for(cfg, name, uses=100)
    client = redis_client(cfg.redis)
    if (left := 60_000 - now_ms() % 60_000) < 5_000:  # the limit counts per minute: start well inside one
        time.sleep(left / 1000)
    client.delete(*client.keys("ldp:edge:enrol:addr:*") or ["none"])  # other tests enrolled from here this minute
    for flood in running_edge(tmp_path, "--enrol-per-address", "5"):
        statuses = [enrol(flood.url, token, name)[0] for _ in range(8)]
        assert statuses == [201] * 5 + [429] * 3
    assert enrolled_devices(cfg, name) == 5


class Tamperer:
    """An HTTP path between devices and the real edge that rewrites the edge's answers (`rewrite(path, headers,
    body) -> (headers, body)`)."""

    def __init__(self, upstream: str, rewrite: Callable[[str, dict[str, str], bytes], tuple[dict[str, str], bytes]]
                 ) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.forward(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                owner.forward(self, "POST")

            def log_message(self, *args: object) -> None:
                pass

        self.upstream, self.rewrite = upstream, rewrite
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("content-type", "authorization")}
        request = urllib.request.Request(self.upstream + handler.path, method=method, headers=headers,
                                         data=handler.rfile.read(length) if length else None)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, got, body = answer.status, dict(answer.headers.items()), answer.read()
        except urllib.error.HTTPError as exc:
            status, got, body = exc.code, dict(exc.headers.items()), exc.read()
        got, body = self.rewrite(handler.path, got, body)
        handler.send_response(status)
        for k, v in got.items():
            if k.lower() in ("content-type", "ldp-signature", "etag"):
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


@pytest.fixture
def tamper(edge: EdgeProcess) -> Iterator[Callable[..., Tamperer]]:
    made: list[Tamperer] = []

    def make(rewrite: Callable[[str, dict[str, str], bytes], tuple[dict[str, str], bytes]]) -> Tamperer:
        made.append(Tamperer(edge.url, rewrite))
        return made[-1]
    yield make
    for t in made:
        t.server.shutdown()


def is_spec(path: str) -> bool:
    return "/specs/" in path


def flipped(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
    changed = bytearray(body)
    changed[len(changed) // 2] ^= 0x01
    return headers, bytes(changed)


def assert_refused_and_nothing_spent(join: Callable[[], Device], code: str, state: Path) -> None:
    with pytest.raises(SpecRefused) as refused:
        join()
    assert refused.value.code == code
    ledger = PrivacyLedger.open(state / "ledger.json")
    assert ledger.commitments == {} and not list((state / "outbox").glob("*/*.report"))


def test_a_tampered_spec_or_pointer_is_refused_and_costs_nothing(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tamper: Callable[..., Tamperer],
        tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    token = token_for(cfg, name, uses=10)
    stranger = new_private_key()
    paths: dict[str, Tamperer] = {
        "bad_signature": tamper(lambda p, h, b: flipped(h, b) if is_spec(p) else (h, b)),
        "untrusted_key": tamper(lambda p, h, b: ({**h, "LDP-Signature": block_header(
            sign_block(stranger, block_from_header(h["LDP-Signature"]) or b""))}, b) if is_spec(p) else (h, b)),
    }
    for code, path in paths.items():
        state = tmp_path / code
        assert_refused_and_nothing_spent(lambda url=path.url, at=state: Device.join(url, name, token, keys,
                                                                                    state_dir=at), code, state)
    ahead = tmp_path / "clock-ahead"  # a device clock far ahead sees every pointer expired: it reports nothing
    assert_refused_and_nothing_spent(lambda: Device.join(edge.url, name, token, keys, state_dir=ahead,
                                                         clock=lambda: now_ms() + 10 * 86_400_000), "expired", ahead)
    assert not DeviceState.open(ahead).of(name).credential  # it refused before it enrolled
    joined = Device.join(edge.url, name, token, keys, state_dir=ahead)  # the clock is right again: it joins
    assert joined.verdict is not None and joined.verdict["accepted"]


def test_an_older_version_served_again_is_a_rollback(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tamper: Callable[..., Tamperer],
        tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    first = urllib.request.urlopen(f"{edge.url}/v1/collections/{name}", timeout=10)
    old_pointer, old_signature = first.read(), first.headers["LDP-Signature"]
    publish_spec(collection.spec.replace(version=2, description="v2"), cfg.bootstrap)
    deadline = time.monotonic() + 60  # the edge re-reads the published specs every few seconds
    while json.loads(urllib.request.urlopen(f"{edge.url}/v1/collections/{name}", timeout=10).read())["version"] < 2:
        assert time.monotonic() < deadline, "the edge never pointed to version 2"
        time.sleep(0.5)
    state = tmp_path / "phone"
    device = Device.join(edge.url, name, token_for(cfg, name), keys, state_dir=state)
    assert device.spec.version == 2
    replay = tamper(lambda p, h, b: ({**h, "LDP-Signature": old_signature}, old_pointer)
                    if p.rstrip("/").endswith(f"/collections/{name}") else (h, b))
    with pytest.raises(SpecRefused) as refused:
        Device.join(replay.url, name, None, keys, state_dir=state)
    assert refused.value.code == "rollback"
    assert DeviceState.open(state).of(name).seen.version == 2  # what it accepted stands


def test_a_pointer_signed_by_the_spec_key_or_an_unpinned_key_is_refused(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tamper: Callable[..., Tamperer],
        tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    admin = load_signing_key(cfg.spec_signing_key)  # the right key for specs, the wrong role for pointers

    def resign(p: str, h: dict[str, str], b: bytes) -> tuple[dict[str, str], bytes]:
        if p.rstrip("/").endswith(f"/collections/{name}"):
            return {**h, "LDP-Signature": block_header(sign_block(admin, pointer_message(b)))}, b
        return h, b
    state = tmp_path / "phone"
    assert_refused_and_nothing_spent(lambda: Device.join(tamper(resign).url, name, token_for(cfg, name), keys,
                                                         state_dir=state), "untrusted_key", state)
    assert load_signing_key(pointer_key_paths(cfg)[0])  # the edge's own key signs what the honest path serves


def test_a_spec_above_the_policy_is_refused_with_its_reason_kept(
        live_services: Settings, edge: EdgeProcess, keys: dict[str, Any], tmp_path: Path) -> None:
    with published_collection(live_services) as honest:
        greedy = honest.spec.replace(name=f"greedy-{uuid.uuid4().hex[:8]}", epsilon=50.0)
        publish_spec(greedy, live_services.bootstrap)  # signed by the real admin key: the compromised-server case
        state = tmp_path / "phone"
        assert_refused_and_nothing_spent(
            lambda: Device.join(edge.url, greedy.name, token_for(live_services, greedy.name), keys, state_dir=state),
            "policy_epsilon_per_report", state)
        kept = DeviceState.open(state).of(greedy.name).verdict
        assert kept is not None and not kept["accepted"] and "max_epsilon_per_report 8" in kept["reason"]
        assert not topic_messages(live_services.bootstrap, greedy.topic)


def test_ten_renamed_collections_asking_the_same_question_cannot_reset_the_budget(
        live_services: Settings, edge: EdgeProcess, keys: dict[str, Any], tmp_path: Path) -> None:
    with published_collection(live_services) as base:
        names = [f"{base.spec.name}-copy{i}" for i in range(10)]
        for name in names:
            publish_spec(base.spec.replace(name=name), live_services.bootstrap)
        token = token_for(live_services, *names)
        state = tmp_path / "phone"
        verdicts = []
        for name in names:
            try:
                Device.join(edge.url, name, token, keys, state_dir=state).report(RECORD)
                verdicts.append("accepted")
            except SpecRefused as refused:
                verdicts.append(refused.code)
        assert verdicts == ["accepted"] * 4 + ["policy_lifetime_per_device"] * 6  # 4 x 8 = the device-wide 32
        assert sum(PrivacyLedger.open(state / "ledger.json").commitments.values()) == 32.0


def test_damaged_state_and_a_full_disk_are_clear_errors_that_charge_nothing(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, name = collection.cfg, collection.spec.name
    token = token_for(cfg, name)
    state = tmp_path / "phone"
    device = Device.join(edge.url, name, token, keys, state_dir=state)
    before = (state / "ledger.json").read_bytes()
    import ldpstream.contract.files as files_module  # the one atomic write (the device state's, the ledger's)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files_module.os, "fsync", full)
    with pytest.raises(StateError, match="No space left"):
        device.report(RECORD)
    monkeypatch.undo()
    assert (state / "ledger.json").read_bytes() == before and device.transport is not None
    assert len(device.transport.outbox) == 0  # nothing queued, nothing sent
    with pytest.raises(RecordError):
        device.report({**RECORD, "battery_level": True})  # a boolean is not a number: refused, charged nothing
    assert (state / "ledger.json").read_bytes() == before
    (state / "ledger.json").write_text('{"format": 3, "collections": {"x": ')
    with pytest.raises(StateError, match="ledger"):
        Device.join(edge.url, name, None, keys, state_dir=state)
    (state / "device.json").write_bytes(b"\x00garbage")
    with pytest.raises(StateError, match="damaged"):
        Device.join(edge.url, name, None, keys, state_dir=state)


def test_a_device_that_leaves_can_send_nothing_more(
        collection: Collection, edge: EdgeProcess, keys: dict[str, Any], tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    device = Device.join(edge.url, name, token_for(cfg, name), keys, state_dir=tmp_path / "phone")
    assert device.transport is not None
    credential = device.transport.credential
    device.report(RECORD)  # made before it leaves: dropped with its outbox (its budget stays spent)
    device.leave()
    assert DeviceState.open(tmp_path / "phone").of(name).credential is None
    with pytest.raises(SpecRefused) as refused:
        device.report(RECORD)
    assert refused.value.code == "left" and device.flush() == 0
    assert not topic_messages(cfg.bootstrap, collection.spec.topic)
    with pytest.raises(EdgeError, match="token is needed"):
        Device.join(edge.url, name, None, keys, state_dir=tmp_path / "phone")
    assert redis_client(cfg.redis).hget(devices_key(name, credential.device), credential.device) == b"0"


def test_the_command_line_mints_a_token_pins_the_keys_and_simulates_devices_joining(
        collection: Collection, edge: EdgeProcess, tmp_path: Path) -> None:
    name = collection.spec.name
    ldp = [sys.executable, "-m", "ldpstream"]
    token, trust = tmp_path / "token", tmp_path / "keys.json"
    subprocess.run([*ldp, "devices", "mint-token", "--collection", name, "--uses", "150", "--expires", "1h",
                    "--out", str(token)], check=True, capture_output=True)
    assert token.stat().st_mode & 0o777 == 0o600
    trust.write_text(subprocess.run([*ldp, "spec", "keys", "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    assert {k["role"] for k in json.loads(trust.read_text())["keys"]} == {"spec", "pointer"}
    policy, spec = tmp_path / "policy.yaml", tmp_path / "spec.json"
    policy.write_text("max_epsilon_per_report: 2\n")  # the collection asks for 4: every device refuses
    spec.write_text(collection.spec.canonical_json())
    out = subprocess.run([*ldp, "simulate", "--spec", str(spec), "--devices", "100", "--join", edge.url, "--token",
                          str(token), "--trust", str(trust), "--policy", str(policy), "--json"],
                         capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0, out.stderr
    assert result["refused"] == {"policy_epsilon_per_report": 100} and result["joined"] == 0
    assert enrolled_devices(collection.cfg, name) == 0
    out = subprocess.run([*ldp, "simulate", "--spec", str(spec), "--devices", "200", "--join", edge.url, "--token",
                          str(token), "--json"], capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 1  # 150 uses (the devices that refused never enrolled): 50 of these cannot enrol
    assert result["joined"] == 150 and result["enrol_failures"] == {"403": 50} and result["acknowledged"] == 150


def ask(url: str, method: str, origin: str) -> tuple[int, dict[str, str]]:
    """A browser's request (its Origin; a preflight's Access-Control-Request-Method): the status and headers."""
    request = urllib.request.Request(url, method=method, headers={"Origin": origin,
                                                                  "Access-Control-Request-Method": "POST"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers.items())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items())


def test_browsers_of_configured_origins_only_get_cors_answers(live_services: Settings, tmp_path: Path) -> None:
    for edge in running_edge(tmp_path, "--cors-origin", "https://app.example"):
        status, headers = ask(f"{edge.url}/v1/enroll", "OPTIONS", "https://app.example")
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert "POST" in headers["Access-Control-Allow-Methods"]
        assert "Authorization" in headers["Access-Control-Allow-Headers"]
        status, headers = ask(f"{edge.url}/v1/collections/x", "GET", "https://app.example")
        assert status == 404 and headers["Access-Control-Allow-Origin"] == "https://app.example"  # it can read why
        assert "LDP-Signature" in headers["Access-Control-Expose-Headers"]
        status, headers = ask(f"{edge.url}/v1/enroll", "OPTIONS", "https://evil.example")
        assert status == 403 and "Access-Control-Allow-Origin" not in headers
        assert "Access-Control-Allow-Origin" not in ask(f"{edge.url}/v1/collections/x", "GET", "https://evil.example")[1]
    (tmp_path / "plain").mkdir()
    for edge in running_edge(tmp_path / "plain"):  # no origin by default
        status, headers = ask(f"{edge.url}/v1/enroll", "OPTIONS", "https://app.example")
        assert status == 405 and "Access-Control-Allow-Origin" not in headers  # POST only, and no CORS
