"""A collection with a factorization attribute (prefix workload: the CDF) end to end over Kafka and Redis."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from pipeline_support import Collection, aggregate_fleet

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.spec import parse_spec
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.specs import publish_spec, read_specs
from ldpstream.runtime.strategies import load_strategy

pytestmark = pytest.mark.integration

VALUES = [f"{ms}ms" for ms in (5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240)]
SPEC = """
name: NAME
version: 1
epsilon: 2
sampling: one
windows: [1h]
attributes:
  - {name: latency, type: categorical, values: VALUES, mechanism: factorization, workload: prefix}
  - {name: battery, type: numeric, range: [0, 100], mechanism: pm}
"""


def test_prefix_workload_answers_within_4_standard_errors(live_services: Settings,
                                                          tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spec = parse_spec(SPEC.replace("NAME", f"it-cdf-{uuid.uuid4().hex[:8]}").replace("VALUES", str(VALUES)))
    published = publish_spec(spec, live_services.bootstrap)
    pinned = published.spec.attributes[0].strategy  # type: ignore[union-attr]
    assert pinned is not None and read_specs(live_services.bootstrap)[spec.key] == published.spec
    assert publish_spec(spec, live_services.bootstrap).created is False  # same file, same optimised strategy
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(live_services.spec_trusted_keys))  # the worker's, kept
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))  # an empty cache: the strategy comes from ldp.strategies
    assert load_strategy(pinned, live_services.bootstrap).hash == pinned
    store = RedisStore(live_services.redis)
    collection = Collection(live_services, published.spec, store, f"ldp-aggregator-it-{spec.name}")
    result = aggregate_fleet(collection, 20_000, seed=9)  # the answers' own standard errors are for this n
    entry = collection.estimates()["attributes"]["latency"]
    assert entry["workload"] == "prefix" and list(entry["answers"]) == [f"<= {v}" for v in VALUES]
    freqs = result.truth["attributes"]["latency"]["frequencies"]  # type: ignore[index]
    cdf = np.cumsum([freqs[v] for v in VALUES])
    for (query, answer), true in zip(entry["answers"].items(), cdf, strict=True):
        assert abs(answer["estimate"] - true) <= 4 * answer["stderr"], (query, answer, true)
    store.delete_collection(spec.name)
    delete_topic(live_services.bootstrap, spec.topic)
