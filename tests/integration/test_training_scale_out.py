"""Several coordinators of one training job, as users run them (`ldp train run JOB` three times), one SIGKILLed
mid-run and another started, while devices train through the real edge, Kafka and Redis (protocol section 13.6).
The versions come one after another, each took exactly B updates, no update is counted twice, no device took part
more than `max_rounds` times, one version number always names the same model bytes (no two coordinators stepped
from the same state), every descriptor served is signed, the edge never serves an older version than it served
(no device sees a rollback), and every coordinator stops by itself once the job is done. Hostile update bodies sent
to the edge meanwhile are each refused with a protocol code (never a 5xx) and never reach the coordinators'
counts."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from edge_support import EdgeProcess, running_edge

from ldpstream.contract.auth import authorization
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.signatures import TrustedKeys, verify_block
from ldpstream.contract.topics import UPDATES_TOPIC
from ldpstream.contract.training import (
    MAX_UPDATE_BYTES,
    JobSpec,
    ModelDescriptor,
    encode_update,
    model_message,
    parse_descriptor,
)
from ldpstream.device.edge_api import EdgeClient
from ldpstream.runtime.jobs import KEEP_VERSIONS, model_prefix, publish_job
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.kafka import ReportProducer
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import load_signing_key
from ldpstream.sgd.fleet import FleetRun, train_fleet
from ldpstream.sgd.images import LabelledSet
from ldpstream.sgd.jobfile import complete_job
from ldpstream.sgd.jobrun import JobCoordinator, RunState, participations_key, state_key
from tests.fuzzing import mutate

pytestmark = pytest.mark.integration

LDP = [sys.executable, "-m", "ldpstream"]
B, VERSIONS, ROUNDS, DEVICES = 3, 4, 2, 10  # 12 updates taken of the 20 the devices may send
EDGE_CODES = {"malformed", "wrong_shape", "not_finite", "too_large", "closed_version", "duplicate", "round_limit",
              "unauthorized", "replayed", "rate_limited"}


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


def coordinator(tmp_path: Path, job: str, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*LDP, "train", "run", job], stdout=(tmp_path / f"coordinator-{n}.log").open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


class ServedVersions:
    """What the edge serves as the job's current model, polled in a thread: (version, sha256 of its bytes) per
    descriptor answered, each descriptor's signature verified against the pinned online keys."""

    def __init__(self, url: str, job: str, keys: TrustedKeys) -> None:
        self.client, self.job, self.keys = EdgeClient(url, 5.0), job, keys
        self.seen: list[tuple[int, str]] = []
        self.unsigned: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.02):
            try:
                served = self.client.model(self.job)
            except Exception:  # noqa: BLE001 - no model yet, or the edge busy: poll again
                continue
            assert served is not None
            try:
                verify_block(self.keys.pointer, served.block, model_message(served.body), "model")
            except ValueError:
                self.unsigned.append(served.body)
                continue
            descriptor: ModelDescriptor = parse_descriptor(served.body)
            self.seen.append((descriptor.version, descriptor.sha256))

    def close(self) -> list[tuple[int, str]]:
        self.stop.set()
        self.thread.join(10)
        return self.seen


def hostile_updates(edge: EdgeProcess, cfg: Settings, spec: JobSpec, count: int) -> dict[int, int]:
    """`count` mutations of a valid update (tests/fuzzing.py), each signed by one enrolled device and posted: the
    statuses answered, each asserted a refusal with a protocol code (or the one admission of a mutation that is
    still a valid update)."""
    token = mint(load_token_key(cfg), new_token([spec.key], 1, now_ms(), now_ms() + 3_600_000))
    credential = EdgeClient(edge.url).enroll(token, spec.key)
    valid = encode_update(spec.job_id, spec.version, 0, {"value": np.zeros((1, spec.parameters), dtype="<f4")})
    rng = random.Random(40)
    path = f"/v1/jobs/{spec.job_id}/updates"
    statuses: dict[int, int] = {}
    for _ in range(count):
        body = mutate(valid, rng)
        headers = {"Content-Type": "application/msgpack",
                   "Authorization": authorization(credential.device, credential.key, "POST", path, body, now_ms())}
        request = urllib.request.Request(edge.url + path, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, reply = answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            status, reply = exc.code, json.loads(exc.read())
        except (urllib.error.URLError, ConnectionError):  # the edge refused a body too large before it was sent
            assert len(body) > MAX_UPDATE_BYTES
            status, reply = 413, {"reason": "too_large"}
        assert status == 200 or (400 <= status < 500 and reply["reason"] in EDGE_CODES), (status, reply)
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def job(batch_size: int) -> JobSpec:
    return complete_job({"job_id": f"scale-{uuid.uuid4().hex[:8]}", "version": 1,
                         "model": {"architecture": "softmax", "dims": [4, 3]}, "mechanism": {"name": "privunitg"},
                         "clip": 1.0, "epsilon": 4.0, "max_rounds": ROUNDS, "batch_size": batch_size,
                         "max_versions": VERSIONS, "lr": 0.5, "momentum": 0.5, "max_examples": 10,
                         "version_validity_s": 3600})


def test_a_coordinator_that_loaded_a_state_another_then_stepped_never_serves_its_older_version(
        live_services: Settings) -> None:
    """Coordinator `late` loads version 0; `busy` then steps to version 1 and publishes it; `late`'s re-publication
    of what it loaded (what `start()` does) must not put version 0 back over version 1 (the edge would serve a
    rollback: devices refuse it, and refuse updates for version 1 as closed): it writes nothing and reloads."""
    cfg = live_services
    spec = job(1)
    publish_job(spec, cfg.bootstrap)
    client = redis_client(cfg.redis)
    busy, late = (JobCoordinator(spec, cfg.bootstrap, redis_client(cfg.redis),
                                 load_signing_key(cfg.pointer_signing_key)) for _ in range(2))
    busy.start()
    assert late.start().version == 0
    producer = ReportProducer(cfg.bootstrap, linger_ms=0)
    producer.produce(UPDATES_TOPIC, encode_update(spec.job_id, 1, 0, {"value": np.full((1, spec.parameters), 0.1,
                                                                                         dtype="<f4")}),
                     (7).to_bytes(8, "little"))
    producer.flush()
    assert busy.run(should_stop=lambda: busy.state is not None and busy.state.version >= 1).version == 1
    served = client.hgetall(model_prefix(spec.job_id) + "model")
    assert not late._publish_current()  # noqa: SLF001 - the step of start() that raced
    assert client.hgetall(model_prefix(spec.job_id) + "model") == served
    assert int(served[b"version"]) == 1 and late.start().version == 1


def test_three_coordinators_one_killed_and_replaced_take_each_update_once(
        live_services: Settings, edge: EdgeProcess, tmp_path: Path) -> None:
    cfg = live_services
    spec = job(B)
    publish_job(spec, cfg.bootstrap)
    procs = [coordinator(tmp_path, spec.job_id, n) for n in range(3)]
    client = redis_client(cfg.redis)
    try:
        served = ServedVersions(edge.url, spec.job_id, TrustedKeys.from_json(pinned_keys(cfg)))
        for _ in range(600):  # version 0, published by whichever coordinator started first
            if served.seen:
                break
            threading.Event().wait(0.05)
        statuses = hostile_updates(edge, cfg, spec, 40)
        assert sum(n for s, n in statuses.items() if s == 200) <= 1 and statuses.get(500) is None
        rng = np.random.default_rng(0)
        data = LabelledSet("blobs", rng.normal(size=(DEVICES, 4)).astype(np.float32), rng.integers(0, 3, DEVICES), 3)

        def kill_and_replace(run: FleetRun) -> None:
            if run.last_version == 2 and len(procs) == 3:  # mid-run: version 2 of 4 served
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait()
                procs.append(coordinator(tmp_path, spec.job_id, 3))

        token = mint(load_token_key(cfg), new_token([spec.key], DEVICES, now_ms(), now_ms() + 3_600_000))
        run = train_fleet(edge.url, spec.job_id, token, pinned_keys(cfg), data, DEVICES, "iid", tmp_path / "fleet",
                          seed=1, concurrency=B, timeout_s=60, on_round=kill_and_replace)
        for proc in procs[1:]:  # each running coordinator sees the job done and stops by itself
            assert proc.wait(timeout=30) == 0, (tmp_path / f"coordinator-{procs.index(proc)}.log").read_text()
        seen = served.close()
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert len(procs) == 4 and run.joined == DEVICES and "refused:rollback" not in run.outcomes, run.to_json()
    state = RunState.from_redis(client.hgetall(state_key(spec.job_id)))
    assert state.done and state.version == VERSIONS
    assert state.outcomes.get("accepted") == B * VERSIONS, state.outcomes
    assert set(state.outcomes) <= {"accepted", "refused:closed_version"}, state.outcomes  # the edge refused the rest
    rounds = {int(d): int(n) for d, n in client.hgetall(participations_key(spec.job_id, spec.version)).items()}
    assert sum(rounds.values()) == B * VERSIONS and max(rounds.values()) <= ROUNDS == state.max_participations
    # the edge's view: signed, never older than before, one model per version number, every version in turn
    versions = [v for v, _ in seen]
    assert not served.unsigned and versions == sorted(versions) and versions[-1] == VERSIONS
    assert sorted(set(versions)) == list(range(VERSIONS + 1)), versions
    hashes: dict[int, set[str]] = {}
    for version, sha in seen:
        hashes.setdefault(version, set()).add(sha)
    assert all(len(h) == 1 for h in hashes.values()), hashes
    for version in range(VERSIONS - KEEP_VERSIONS + 1, VERSIONS + 1):  # the bytes the edge keeps are those named
        data_v = client.get(f"{model_prefix(spec.job_id)}bytes:{version}")
        assert data_v is not None and {hashlib.sha256(data_v).hexdigest()} == hashes[version]
