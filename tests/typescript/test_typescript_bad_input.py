"""The TypeScript SDK against bad input and a failing network, through the real edge (tests/typescript/bad_input.mjs:
a proxy of its own between the devices and the edge tampers with answers, answers 429, 503 and 500, loses an answer,
goes offline): policy refusals and tampered or unsigned specs enrol nothing; a full storage charges nothing and makes
no report; a cleared one refunds nothing; a device offline for days stops reporting when its pointer expires and
drops what the edge would refuse as stale. Here: exactly the devices that joined are enrolled, and exactly the reports
that were sent are counted, once each."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from edge_support import EdgeProcess, running_edge
from pipeline_support import Collection
from ts_support import HERE, run_node

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.spec import parse_spec
from ldpstream.edge.devices import devices_keys
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec

pytestmark = pytest.mark.integration

SPEC = {"version": 1, "epsilon": 2.0, "windows": ["1h"], "one_report_per_window": True,
        "attributes": [{"name": "battery_level", "type": "numeric", "range": [0, 100]},
                       {"name": "network_type", "type": "categorical", "values": ["wifi", "5g", "4g", "offline"]}]}


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    spec = parse_spec(json.dumps({**SPEC, "name": f"bad-{uuid.uuid4().hex[:10]}"}))
    publish_spec(spec, live_services.bootstrap)
    yield Collection(live_services, spec, RedisStore(live_services.redis), f"ldp-aggregator-it-{spec.name}")
    RedisStore(live_services.redis, timeout_s=5.0).delete_collection(spec.name)
    delete_topic(live_services.bootstrap, spec.topic)


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


def test_refusals_failures_and_storage_faults_neither_crash_refund_nor_double_count(
        collection: Collection, edge: EdgeProcess, tmp_path: Path) -> None:
    cfg, name = collection.cfg, collection.spec.name
    token = mint(load_token_key(cfg), new_token([name], 100, now_ms(), now_ms() + 600_000))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"edge": edge.url, "collection": name, "token": token, "keys": pinned_keys(cfg)}))
    worker = collection.start_worker(log_file=tmp_path / "worker.log")
    try:
        summary = json.loads(run_node(HERE / "bad_input.mjs", str(job), timeout=300).stdout)
        assert {k: summary[k] for k in ("refusals", "storage", "retries", "offline")} == dict.fromkeys(
            ("refusals", "storage", "retries", "offline"), "ok")
        client = redis_client(cfg.redis)
        assert sum(client.hlen(key) for key in devices_keys(name)) == summary["enrolled"]
        assert collection.wait_accepted(summary["sent"], timeout_s=60) == summary["sent"]
        outcomes = collection.store.outcomes(name)
        assert outcomes["accepted"] == summary["sent"], outcomes  # the report whose answer was lost: counted once
    finally:
        worker.terminate()
        worker.wait(30)
