"""Health that tells the truth, against a real worker: waiting messages and no worker, a draining worker, a
SIGKILLed one. The pipeline check is scoped to this test's collection (the shared services hold others)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from pipeline_support import Collection, send_in_background

from ldpstream.aggregator.health import HealthPolicy, WorkerRegistry, pipeline_health, worker_id
from ldpstream.aggregator.plans import PlanRegistry
from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.spec import load_spec
from ldpstream.readapi.api import PublishedPlans, TopicEnds, create_app
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from tests.readapi.test_api import http_get, serving, token_verifier

pytestmark = pytest.mark.integration
POLICY = HealthPolicy(heartbeat_max_age_s=5, stall_s=4, crash_limit=3, crash_window_s=60)
DEVICES = 20_000


def healthz(url: str) -> tuple[int, dict[str, object]]:
    status, _, body = http_get(url + "/healthz")
    return status, json.loads(body)


def wait_for(check, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


def test_healthz_follows_the_workers_and_the_lag(live_services: Settings) -> None:
    spec = load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml").replace(
        name=f"it-health-{uuid.uuid4().hex[:8]}", partitions=2)
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    collection = Collection(live_services, spec, store, f"ldp-aggregator-{spec.name}")
    ends = TopicEnds(live_services.bootstrap)
    app = create_app(store, PublishedPlans(PlanRegistry(live_services.bootstrap)), ends, {},
                     lambda: pipeline_health(store, {spec.name: spec.topic}, ends, POLICY, {collection.group}),
                     tokens=token_verifier(live_services))  # /healthz is open: no token is sent
    send_in_background(collection, DEVICES, seed=3).join()
    worker = None
    with serving(app) as url:
        status, body = healthz(url)
        assert status == 503 and f"collection {spec.name}: " in body["pipeline"]["reasons"][0]  # type: ignore[index]
        assert "no worker is alive" in body["pipeline"]["reasons"][0]  # type: ignore[index]
        worker = start_worker(collection.group)
        try:
            assert collection.wait_accepted(DEVICES, 120, lambda: worker.poll() is None) == DEVICES

            def beating() -> list[dict[str, object]]:
                status, body = healthz(url)
                workers = body["pipeline"]["workers"]  # type: ignore[index]
                return [w for w in workers if w["id"] == worker_id(worker.pid)] if status == 200 else []

            assert wait_for(beating, 20)
            assert beating()[0]["alive"] and beating()[0]["group"] == collection.group
            os.kill(worker.pid, signal.SIGKILL)  # no clean stop: its heartbeat stays, and ages
            worker.wait(10)
            assert wait_for(lambda: healthz(url)[0] == 503, 3 * POLICY.heartbeat_max_age_s)
            reasons = healthz(url)[1]["pipeline"]["reasons"]  # type: ignore[index]
            assert any(f"worker {worker_id(worker.pid)} ({collection.group}) is down" in r for r in reasons)
        finally:
            stop_worker(worker)
            WorkerRegistry(store.redis).leave(worker_id(worker.pid))
            store.delete_collection(spec.name)
            delete_topic(live_services.bootstrap, spec.topic)
