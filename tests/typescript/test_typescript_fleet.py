"""End to end: 10,000 devices of the TypeScript SDK (in Node) join a collection with one enrolment token through the
real edge, verify its signed spec against the pinned keys, report once each into the real Kafka; the Python
aggregator counts every report exactly once (no duplicate, no dead letter) and its estimates lie within 4 standard
errors of the devices' true values."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_support import EdgeProcess, running_edge
from pipeline_support import Collection, assert_within_stderr
from ts_support import HERE, run_node

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.enrolment import mint, new_token
from ldpstream.contract.spec import parse_spec
from ldpstream.runtime.join_keys import load_token_key, pinned_keys
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec

pytestmark = pytest.mark.integration

DEVICES = int(__import__("os").environ.get("LDP_TS_FLEET_DEVICES", "10000"))
NETWORKS = ["wifi", "4g", "5g", "none"]
SPEC = {"version": 1, "epsilon": 4.0, "sampling": "split", "windows": ["1h"],
        "attributes": [{"name": "battery_level", "type": "numeric", "range": [0, 100], "mechanism": "pm"},
                       {"name": "network_type", "type": "categorical", "values": NETWORKS, "mechanism": "auto"}]}


@pytest.fixture
def collection(live_services: Settings) -> Iterator[Collection]:
    spec = parse_spec(json.dumps({**SPEC, "name": f"ts-{uuid.uuid4().hex[:10]}"}))
    publish_spec(spec, live_services.bootstrap)
    c = Collection(live_services, spec, RedisStore(live_services.redis), f"ldp-aggregator-it-{spec.name}")
    yield c
    RedisStore(live_services.redis, timeout_s=5.0).delete_collection(spec.name)
    delete_topic(live_services.bootstrap, spec.topic)


@pytest.fixture
def edge(live_services: Settings, tmp_path: Path) -> Iterator[EdgeProcess]:
    yield from running_edge(tmp_path, "--enrol-per-address", "1000000")


def population(n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rng = np.random.default_rng(seed)
    battery = rng.uniform(0, 100, n).round(2)
    network = rng.choice(len(NETWORKS), size=n, p=[0.5, 0.3, 0.15, 0.05])
    records = [{"battery_level": float(b), "network_type": NETWORKS[k]} for b, k in zip(battery, network, strict=True)]
    truth = {"attributes": {"battery_level": {"mean": float(battery.mean())},
                            "network_type": {"frequencies": {v: float((network == i).mean())
                                                             for i, v in enumerate(NETWORKS)}}}}
    return records, truth


def test_ten_thousand_typescript_devices_are_counted_once_each(collection: Collection, edge: EdgeProcess,
                                                               tmp_path: Path) -> None:
    cfg = collection.cfg
    now = now_ms()
    token = mint(load_token_key(cfg), new_token([collection.spec.name], DEVICES, now, now + 3_600_000))
    records, truth = population(DEVICES, seed=26)
    job = tmp_path / "fleet.json"
    job.write_text(json.dumps({"edge": edge.url, "collection": collection.spec.name, "token": token,
                               "keys": pinned_keys(cfg), "records": records, "concurrency": 48}))
    worker = collection.start_worker(log_file=tmp_path / "worker.log")
    try:
        summary = json.loads(run_node(HERE / "fleet.mjs", str(job), timeout=900).stdout)
        assert summary["errors"] == [] and summary["joined"] == DEVICES, summary
        assert summary["reported"] == DEVICES and summary["sent"] == DEVICES and summary["pending"] == 0, summary
        assert collection.wait_accepted(DEVICES, timeout_s=300) == DEVICES
        outcomes = collection.store.outcomes(collection.spec.name)
        assert outcomes.get("accepted", 0) == DEVICES and set(outcomes) == {"accepted"}, outcomes
        estimates = collection.estimates()
        assert_within_stderr(estimates, truth)
    finally:
        worker.terminate()
        worker.wait(30)
    print(json.dumps({"devices": DEVICES, "seconds": summary["seconds"], "retried_429": summary["retried_429"]}))
