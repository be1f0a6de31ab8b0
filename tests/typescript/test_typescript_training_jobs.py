"""TypeScript devices train through the real edge, Kafka and Redis (docs/reference/protocol.md section 13): Node
`TrainingDevice`s (tests/typescript/train_devices.mjs) join a job with its token, train on their own rows, and the
real coordinator takes their updates and steps; a device whose policy caps epsilon below the job's refuses it and
sends nothing; Node and Python devices train one Fashion-MNIST softmax job, one version each; the example page
(examples/web-train/) trains in Debian's headless Chromium."""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_support import EdgeProcess, running_edge
from test_typescript_browser import CHROMIUM, PageServer
from ts_support import HERE, run_node
from ts_training import run_node_fleet

from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.training import JobSpec
from ldpstream.runtime.jobs import publish_job
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import load_signing_key
from ldpstream.sgd.fleet import train_fleet
from ldpstream.sgd.images import device_split, fashion_mnist
from ldpstream.sgd.jobfile import complete_job, held_out
from ldpstream.sgd.jobrun import JobCoordinator, RunState, state_key

pytestmark = pytest.mark.integration


def job_spec(**fields: Any) -> JobSpec:
    base = {"job_id": f"ts-{uuid.uuid4().hex[:8]}", "version": 1, "model": {"architecture": "softmax",
            "dims": [4, 3]}, "mechanism": {"name": "privunitg"}, "clip": 1.0, "epsilon": 4.0, "max_rounds": 1,
            "batch_size": 2, "max_versions": 50, "lr": 0.5, "momentum": 0.0, "max_examples": 10,
            "version_validity_s": 3600}
    return complete_job({**base, **fields})


class Coordinator:
    """The job's real coordinator in a thread (as `ldp train run JOB` runs it)."""

    def __init__(self, cfg: Settings, spec: JobSpec, evaluation: dict[str, Any] | None = None) -> None:
        publish_job(spec, cfg.bootstrap)
        self.spec, self.cfg, self.stop = spec, cfg, threading.Event()
        self.coordinator = JobCoordinator(spec, cfg.bootstrap, redis_client(cfg.redis),
                                          load_signing_key(cfg.pointer_signing_key),
                                          held_out(spec, evaluation) if evaluation else None)
        self.coordinator.start()
        self.thread = threading.Thread(target=self.coordinator.run, kwargs={"should_stop": self.stop.is_set},
                                       daemon=True)
        self.thread.start()

    def state(self) -> RunState:
        return RunState.from_redis(redis_client(self.cfg.redis).hgetall(state_key(self.spec.job_id)))

    def wait(self, done: Any, timeout_s: float = 60.0, about: Any = None) -> RunState:
        waited = threading.Event()
        for _ in range(int(timeout_s / 0.05)):
            state = self.state()
            if done(state):
                return state
            waited.wait(0.05)
        raise AssertionError(f"not reached: {self.state().outcomes}, version {self.state().version}; {about}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


def token(cfg: Settings, job: str, uses: int = 1000) -> str:
    return mint(load_token_key(cfg), new_token([f"job/{job}"], uses, now_ms(), now_ms() + 3_600_000))


def test_node_devices_train_through_the_edge_and_a_strict_policy_refuses(live_services: Settings, edge: EdgeProcess,
                                                                        tmp_path: Path) -> None:
    spec = job_spec(max_versions=3)
    running = Coordinator(live_services, spec)
    try:
        rng = np.random.default_rng(5)
        x, y = rng.normal(size=(12, 4)), rng.integers(0, 3, 12)
        rows = np.arange(12).reshape(6, 2)
        keys = pinned_keys(live_services)
        strict = run_node_fleet(tmp_path / "strict", edge.url, spec.job_id, token(live_services, spec.job_id), keys,
                                x, y, rows[:2], policy={"maxEpsilonPerReport": 1.0}, timeout_s=30)
        assert strict["joined"] == 0 and strict["refused"] == {"policy_epsilon_per_report": 2}
        assert strict["updates"] == 0 and not any((tmp_path / "strict" / "state" / "device-0" / "outbox").glob("*"))
        run = run_node_fleet(tmp_path / "fleet", edge.url, spec.job_id, token(live_services, spec.job_id), keys,
                             x, y, rows, timeout_s=120)
        state = running.wait(lambda s: s.done, about=run)
    finally:
        running.close()
    # 6 devices of one round each, B = 2, 3 versions: exactly B updates a version, each device's one update taken
    assert run["joined"] == 6 and run["updates"] == run["taken"] == state.outcomes["accepted"] == 6, (run, state)
    assert state.version == 3 and state.max_participations == 1


def test_node_and_python_devices_train_one_fashion_mnist_job(live_services: Settings, edge: EdgeProcess,
                                                             tmp_path: Path) -> None:
    """One Fashion-MNIST softmax job (B = 20, 2 versions, eps 8, ten images per device): 20 Python devices make
    version 0's updates, then 20 Node devices version 1's; the coordinator takes exactly B of each, counts each
    once, steps with both SDKs' updates and evaluates every version on its held-out rows."""
    spec = job_spec(model={"architecture": "softmax", "dims": [784, 10]}, epsilon=8.0, batch_size=20,
                    max_versions=2, lr=1.0, momentum=0.5)
    running = Coordinator(live_services, spec, {"dataset": "fashion-mnist", "rows": 2000})
    train = fashion_mnist("train")
    keys = pinned_keys(live_services)
    try:
        python = train_fleet(edge.url, spec.job_id, token(live_services, spec.job_id), keys, train, 20, "non-iid",
                             tmp_path / "py", seed=1, concurrency=1, timeout_s=120).to_json()
        running.wait(lambda s: s.version >= 1, about=python)
        rows = device_split("non-iid", train.y, 2).rows[:20]
        node = run_node_fleet(tmp_path / "node", edge.url, spec.job_id, token(live_services, spec.job_id), keys,
                              train.x, train.y, rows, seed=2, timeout_s=120)
        state = running.wait(lambda s: s.done, about=node)
    finally:
        running.close()
    assert python["taken"] == 20 and node["taken"] == 20 and node["joined"] == 20, (python, node)
    assert state.outcomes == {"accepted": 40} and state.version == 2 and state.max_participations == 1
    assert len(state.evaluations) == 2 and all(0.0 <= e["accuracy"] <= 1.0 for e in state.evaluations)


def test_the_example_page_trains_in_chromium(live_services: Settings, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), "Chromium is missing: `apt-get install -y chromium` (make install-test does it)"
    spec = job_spec(model={"architecture": "softmax", "dims": [784, 10]}, epsilon=8.0, batch_size=1, max_versions=1)
    running = Coordinator(live_services, spec)
    pages = PageServer(pinned_keys(live_services))
    edges = running_edge(tmp_path, "--cors-origin", pages.origin, "--enrol-per-address", "1000000")
    edge = next(edges)
    try:
        query = urllib.parse.urlencode({"edge": edge.url, "job": spec.job_id, "auto": "1",
                                        "token": token(live_services, spec.job_id)})
        seen = json.loads(run_node(HERE / "browser_train.mjs", f"{pages.origin}/examples/web-train/index.html?{query}",
                                   str(tmp_path), timeout=300).stdout)
        state = running.wait(lambda s: s.done, about=seen)
    finally:
        running.close()
        pages.close()
        next(edges, None)
    assert seen["state"] == "sent" and "1 taken by the edge" in seen["text"] and not seen["errors"], seen
    assert state.outcomes == {"accepted": 1} and state.version == 1
