"""Devices train models through the edge (docs/reference/protocol.md section 13): the real edge, Kafka and Redis, the
real device SDK (`TrainingDevice`), the real coordinator (`JobCoordinator`, in a thread here). Bad input from devices,
from the network and from a compromised or frozen coordinator is refused where it happens, nothing is counted twice,
no budget is refunded, and the coordinator keeps going."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_support import EdgeProcess, running_edge

from ldpstream.contract.auth import Credential, authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.signatures import sign_block
from ldpstream.contract.snapshot import Snapshot
from ldpstream.contract.topics import UPDATES_TOPIC
from ldpstream.contract.training import JobSpec, ModelDescriptor, encode_update, model_message
from ldpstream.device.ledger import BudgetExceeded
from ldpstream.device.policy import PrivacyPolicy
from ldpstream.device.sdk import SpecRefused
from ldpstream.device.training import TrainingDevice
from ldpstream.runtime.jobs import model_prefix, publish_job
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.kafka import ReportProducer
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import load_signing_key
from ldpstream.sgd.fleet import train_fleet
from ldpstream.sgd.images import fashion_mnist
from ldpstream.sgd.jobfile import complete_job, held_out
from ldpstream.sgd.jobrun import JobCoordinator, RunState, state_key, status

pytestmark = pytest.mark.integration


def job_spec(**fields: Any) -> JobSpec:
    base = {"job_id": f"tiny-{uuid.uuid4().hex[:8]}", "version": 1, "model": {"architecture": "softmax",
            "dims": [4, 3]}, "mechanism": {"name": "privunitg"}, "clip": 1.0, "epsilon": 4.0, "max_rounds": 1,
            "batch_size": 2, "max_versions": 50, "lr": 0.5, "momentum": 0.0, "max_examples": 10,
            "version_validity_s": 3600}
    return complete_job({**base, **fields})


@dataclass
class Running:
    spec: JobSpec
    cfg: Settings
    coordinator: JobCoordinator
    stop: threading.Event
    thread: threading.Thread

    def state(self) -> RunState:
        return RunState.from_redis(redis_client(self.cfg.redis).hgetall(state_key(self.spec.job_id)))

    def wait_version(self, version: int, timeout_s: float = 30.0) -> RunState:
        waited = threading.Event()
        for _ in range(int(timeout_s / 0.05)):
            state = self.state()
            if state.version >= version:
                return state
            waited.wait(0.05)
        raise AssertionError(f"version {version} not reached: {self.state().version}, {self.state().outcomes}")

    def restart(self) -> None:
        """Stop the coordinator and start another one of the same job (a crash and a restart, or a second process):
        it goes on from the state in Redis, reading from the offsets that state applied."""
        self.stop.set()
        self.thread.join(30)
        self.stop = threading.Event()
        self.coordinator = JobCoordinator(self.spec, self.cfg.bootstrap, redis_client(self.cfg.redis),
                                          load_signing_key(self.cfg.pointer_signing_key))
        self.thread = threading.Thread(target=self.coordinator.run, kwargs={"should_stop": self.stop.is_set},
                                       daemon=True)
        self.thread.start()

    def wait_accepted(self, n: int, timeout_s: float = 30.0) -> RunState:
        waited = threading.Event()
        for _ in range(int(timeout_s / 0.05)):
            state = self.state()
            if state.outcomes.get("accepted", 0) >= n:
                return state
            waited.wait(0.05)
        raise AssertionError(f"{n} updates not accepted: {self.state().outcomes}")


def start_job(cfg: Settings, spec: JobSpec, evaluation: dict[str, Any] | None = None) -> Running:
    publish_job(spec, cfg.bootstrap)
    evaluator = held_out(spec, evaluation) if evaluation else None
    coordinator = JobCoordinator(spec, cfg.bootstrap, redis_client(cfg.redis),
                                 load_signing_key(cfg.pointer_signing_key), evaluator)
    coordinator.start()
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    return Running(spec, cfg, coordinator, stop, thread)


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


@pytest.fixture
def tiny(live_services: Settings) -> Iterator[Running]:
    running = start_job(live_services, job_spec())
    yield running
    running.stop.set()
    running.thread.join(10)


def token(cfg: Settings, job: str, uses: int = 1000) -> str:
    return mint(load_token_key(cfg), new_token([f"job/{job}"], uses, now_ms(), now_ms() + 3_600_000))


def post(url: str, path: str, body: bytes, credential: Credential | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/msgpack"}
    if credential is not None:
        headers["Authorization"] = authorization(credential.device, credential.key, "POST", path, body, now_ms())
    request = urllib.request.Request(url + path, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def examples(rng: np.random.Generator, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(size=(n, 4)), rng.integers(0, 3, n)


def device(edge: EdgeProcess, running: Running, directory: Path, i: int, **kwargs: Any) -> TrainingDevice:
    return TrainingDevice.join(edge.url, running.spec.job_id, token(running.cfg, running.spec.job_id),
                               pinned_keys(running.cfg), state_dir=directory / f"d{i}",
                               rng=np.random.default_rng(i), **kwargs)


def test_bad_updates_are_refused_at_the_edge_counted_once_and_the_coordinator_goes_on(
        tiny: Running, edge: EdgeProcess, tmp_path: Path) -> None:
    spec, cfg = tiny.spec, tiny.cfg
    path = f"/v1/jobs/{spec.job_id}/updates"
    a, b, c = (device(edge, tiny, tmp_path, i) for i in range(3))
    rng = np.random.default_rng(7)
    first = a.train(examples(rng))
    assert first is not None and a.train(examples(rng)) is None  # one update per version, nothing charged again
    assert a.ledger.lifetime_spent(a.key) == spec.epsilon
    assert a.flush() == 1
    tiny.restart()  # whether or not the first coordinator applied a's update, it is counted once
    credential = a.transport.credential
    assert post(edge.url, path, first, credential) == (409, {
        "reason": "duplicate", "error": "this device already sent an update for version 0",
        "verdicts": ["duplicate"]})
    zeros = np.zeros((1, spec.parameters), dtype="<f4")
    nan, inf = zeros.copy(), zeros.copy()
    nan[0, 1], inf[0, 0] = np.nan, np.inf
    bodies = {"not_finite": encode_update(spec.job_id, 1, 0, {"value": nan}),
              "wrong_shape": encode_update(spec.job_id, 1, 0, {"value": zeros[:, :-1]}),
              "malformed": b"\x93\x01\x02"}
    for reason, body in [*bodies.items(), ("not_finite", encode_update(spec.job_id, 1, 0, {"value": inf}))]:
        code, answer = post(edge.url, path, body, b.transport.credential)
        assert (code, answer["reason"]) == (400, reason)
    assert post(edge.url, path, encode_update(spec.job_id, 1, 5, {"value": zeros}), b.transport.credential)[1][
        "reason"] == "closed_version"
    assert post(edge.url, f"/v1/jobs/nope-{uuid.uuid4().hex[:6]}/updates", first, credential)[0] == 404
    assert post(edge.url, path, first, None)[0] == 401
    # a stray writer behind the edge: the coordinator refuses it too, and counts it once
    producer = ReportProducer(cfg.bootstrap, linger_ms=0)
    producer.produce(UPDATES_TOPIC, bodies["not_finite"], (12345).to_bytes(8, "little"))
    producer.flush()
    assert b.train(examples(rng)) is not None and b.flush() == 1  # the second update of version 0: a step
    state = tiny.wait_version(1)
    assert c.train(examples(rng)) is not None and c.flush() == 1
    assert post(edge.url, path, first, credential)[1]["reason"] == "closed_version"  # version 0 is closed
    again = encode_update(spec.job_id, 1, 1, {"value": zeros})
    assert post(edge.url, path, again, credential)[1]["reason"] == "round_limit"  # max_rounds = 1
    with pytest.raises(BudgetExceeded):  # and the device's own ledger would not make it
        a.train(examples(rng))
    state = tiny.wait_accepted(3)
    assert state.outcomes == {"accepted": 3, "refused:not_finite": 1} and state.max_participations == 1
    shown = status(spec, redis_client(cfg.redis).hgetall(state_key(spec.job_id)))
    assert (shown["version"], shown["updates_accepted"], shown["epsilon_per_report"]) == (1, 3, spec.epsilon)


def test_a_device_refuses_a_job_above_its_policy_and_models_it_cannot_believe(
        tiny: Running, edge: EdgeProcess, tmp_path: Path) -> None:
    spec, cfg = tiny.spec, tiny.cfg
    strict = PrivacyPolicy(max_epsilon_per_report=1.0)
    with pytest.raises(SpecRefused) as refused:
        device(edge, tiny, tmp_path, 0, policy=strict)
    assert refused.value.code == "policy_epsilon_per_report"
    assert not (tmp_path / "d0" / "outbox").exists() or not any((tmp_path / "d0" / "outbox").rglob("*.report"))
    phone = device(edge, tiny, tmp_path, 1)
    rng = np.random.default_rng(3)
    client = redis_client(cfg.redis)
    key = model_prefix(spec.job_id) + "model"
    good = client.hgetall(key)
    online = load_signing_key(cfg.pointer_signing_key)
    current = json.loads(good[b"descriptor"])

    def serve(descriptor: dict[str, Any], block: bytes | None = None) -> None:
        body = ModelDescriptor(**descriptor).canonical_json()
        client.hset(key, mapping={"descriptor": body, "signature": block or sign_block(online, model_message(body))})

    cases = {"bad_signature": ({**current}, sign_block(online, b"something else")),
             "wrong_shape": ({**current, "size": 1 << 30}, None),
             "expired": ({**current, "expires_ms": now_ms() - 1}, None),
             "issued_in_future": ({**current, "issued_ms": now_ms() + 3_600_000}, None),
             "done": ({**current, "done": True}, None)}
    for code, (descriptor, block) in cases.items():
        serve(descriptor, block)
        phone._etag = None  # noqa: SLF001 - each case fetched afresh
        with pytest.raises(SpecRefused) as refused:
            phone.train(examples(rng))
        assert refused.value.code == code
    serve({**current, "sha256": "0" * 64})  # signed, but the bytes are not the ones it names
    with pytest.raises(SpecRefused) as refused:
        phone.train(examples(rng))
    assert refused.value.code == "hash_mismatch"
    assert phone.ledger.lifetime_spent(phone.key) == 0.0 and phone.stats()["pending"] == 0  # nothing charged
    client.hset(key, mapping=good)
    assert phone.train(examples(rng)) is not None  # the true version: trained, charged
    later = Snapshot("softmax", (4, 3), current["version"] + 5, np.zeros(spec.parameters)).encode("float64")
    client.set(f"{model_prefix(spec.job_id)}bytes:{current['version'] + 5}", later)
    serve({**current, "version": current["version"] + 5,  # a later version the device has seen...
           "sha256": hashlib.sha256(later).hexdigest()})
    assert phone.model()[0].version == current["version"] + 5
    serve(current)  # ...then the older one again: a rollback
    with pytest.raises(SpecRefused) as refused:
        phone.model()
    assert refused.value.code == "rollback"
    client.hset(key, mapping=good)


def test_python_devices_train_fashion_mnist_softmax_through_the_edge(live_services: Settings, edge: EdgeProcess,
                                                                    tmp_path: Path) -> None:
    """200 devices of ten images each (non-IID), B = 40, 5 versions, eps 8: the held-out accuracy rises from 10%
    (version 0 predicts one class) to about what the offline trainer reaches with such settings (0.33-0.50 over
    seeds at B = 50 and 6 rounds, `ldpstream.sgd.federated`); the 2-point comparison is not a test here (too slow
    for CI) and not yet a benchmark."""
    spec = job_spec(model={"architecture": "softmax", "dims": [784, 10]}, epsilon=8.0, batch_size=40, max_versions=5,
                    lr=1.0, momentum=0.5)
    running = start_job(live_services, spec, {"dataset": "fashion-mnist", "rows": 2000})
    try:
        run = train_fleet(edge.url, spec.job_id, token(live_services, spec.job_id), pinned_keys(live_services),
                          fashion_mnist("train"), 200, "non-iid", tmp_path / "fleet", seed=0, concurrency=1,
                          timeout_s=120)
        state = running.wait_version(5, timeout_s=60)
    finally:
        running.stop.set()
        running.thread.join(10)
    assert state.done and run.joined == 200 and run.taken == state.outcomes["accepted"] == 200
    curve = [e["accuracy"] for e in state.evaluations]
    assert len(curve) == 5 and curve[-1] > 0.2, curve  # chance is 0.1; its stderr at 2,000 rows is 0.007
