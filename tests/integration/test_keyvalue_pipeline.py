"""`type: keyvalue` end to end over real Kafka and Redis: examples/app_usage.yaml's per-app screen time (PCKV) and
crash counts from a simulated fleet within 4 standard errors of the truth, and impossible key-value reports (a key
outside the domain, a value outside its range or set) dead-lettered with their reason while every good one counts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pipeline_support import Collection, aggregate_fleet, dead_letters_of, published_collection

from ldpstream.aggregator.processes import start_worker, stop_worker
from ldpstream.aggregator.processing import OUT_OF_RANGE
from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.pseudonym import device_partitions, integer_pseudonyms
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import AttributeReports, encode, perturbed_batch
from ldpstream.device.perturb import perturb, single_reports
from ldpstream.runtime.kafka import delete_topic, producer_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec

pytestmark = pytest.mark.integration
Z = 4.0


@pytest.fixture
def app_usage(live_services: Settings) -> Iterator[Collection]:
    """examples/app_usage.yaml published under a unique name."""
    with published_collection(live_services, "app_usage.yaml") as c:
        yield c


def test_200k_devices_app_usage_within_4_standard_errors(app_usage: Collection) -> None:
    result = aggregate_fleet(app_usage, 200_000, seed=21)
    estimates = app_usage.estimates()
    assert estimates["attributes"]["screen_minutes"]["mechanism"].startswith("pckv-")
    checked = 0
    for name, entry in estimates["attributes"].items():
        true: dict[str, Any] = result.truth["attributes"][name]
        if "mean" in entry:
            assert abs(entry["mean"] - true["mean"]) <= Z * entry["stderr"], (name, entry, true)
            checked += 1
            continue
        for kind in ("frequencies", "means"):
            for key, e in entry[kind].items():
                if true[kind][key] is None or e["estimate"] is None:  # no holder, or none estimated
                    continue
                assert abs(e["estimate"] - true[kind][key]) <= Z * e["stderr"], (name, kind, key, e, true[kind][key])
                checked += 1
    assert checked >= 1 + 8 + 6  # crashes, every key's frequency, and the means of the keys many devices hold


KV_SPEC = """
name: NAME
version: 1
epsilon: 2
sampling: one
windows: [1h]
attributes:
  - {name: usage, type: keyvalue, keys: [a, b, c], range: [0, 60], mechanism: pckv-grr, padding: 2}
"""


def test_impossible_keyvalue_reports_are_dead_lettered_with_their_reason(live_services: Settings) -> None:
    spec = parse_spec(KV_SPEC.replace("NAME", f"it-kv-{uuid.uuid4().hex[:8]}"))
    publish_spec(spec, live_services.bootstrap)
    store = RedisStore(live_services.redis)
    rng = np.random.default_rng(23)
    good_n, bad_n = 2_000, 300
    now = int(time.time() * 1000)
    devices = integer_pseudonyms(spec.name, np.arange(good_n, dtype=np.uint64))
    sets = [{"a": float(rng.uniform(0, 60))}, {"b": 12.5, "c": 60.0}, {}]
    records = {"usage": [sets[i % 3] for i in range(good_n)]}
    good = [encode(b) for b in single_reports(perturb(spec, devices, np.full(good_n, now), records, rng))]
    extra = integer_pseudonyms(spec.name, np.arange(good_n, good_n + 3 * bad_n, dtype=np.uint64))

    def one(device: int, key: int, value: int) -> bytes:
        block = AttributeReports(0, np.zeros(1, dtype=np.uint32), {"key": np.array([key], dtype=np.uint32),
                                                                   "value": np.array([value], dtype=np.int8)})
        return encode(perturbed_batch(spec.name, 1, np.array([device], dtype=np.uint64), np.array([now]), (block,)))

    # d + l = 5 keys (two dummies), values +-1: key 5 is outside the domain, value 3 outside [-1, 1], 0 not a value.
    bad = ([one(int(d), 5, 1) for d in extra[:bad_n]] + [one(int(d), 1, 3) for d in extra[bad_n:2 * bad_n]]
           + [one(int(d), 0, 0) for d in extra[2 * bad_n:]])
    owner = device_partitions(np.concatenate([devices, extra]), spec.partitions).tolist()
    producer = producer_client(live_services.bootstrap, **{"linger.ms": 5})
    positions = dict.fromkeys(range(spec.partitions), 0)
    expected: dict[tuple[int, int], str] = {}
    for i, message in enumerate(good + bad):
        producer.produce(spec.topic, message, partition=owner[i])
        if i >= good_n:
            expected[(owner[i], positions[owner[i]])] = OUT_OF_RANGE
        positions[owner[i]] += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    worker = start_worker(f"ldp-aggregator-kv-{spec.name}")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and worker.poll() is None:
            offsets = store.offsets(spec.name)
            if sum(offsets.get(f"{spec.topic}:{p}", -1) + 1 for p in range(spec.partitions)) == good_n + 3 * bad_n:
                break
            time.sleep(0.2)
        assert worker.poll() is None, "the worker crashed on bad input"
    finally:
        stop_worker(worker)
    try:
        assert store.outcomes(spec.name)["accepted"] == good_n
        assert dead_letters_of(live_services.bootstrap, spec.topic) == expected
    finally:
        store.delete_collection(spec.name)
        delete_topic(live_services.bootstrap, spec.topic)  # else every later test's worker reads it all again
