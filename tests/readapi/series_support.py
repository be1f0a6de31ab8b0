"""A store holding many windows of simulated reports with their exact truths, and the read API over it, for the
series tests.

Each window gets its own fleet (a seed per window, so its own devices and true records), stamped inside the window,
encoded as the devices send it and aggregated by the real `PartitionProcessor` with its clock set to that time (so
no report is stale), all on partition 0 of a one-partition spec.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ldpstream.aggregator.plans import Plan, PlanRegistry
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore, StatsStore
from ldpstream.contract.clock import now_ms
from ldpstream.contract.spec import CollectionSpec, load_spec, window_seconds
from ldpstream.contract.wire import encode
from ldpstream.readapi.api import PublishedPlans, TopicEnds, create_app
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.settings import PROJECT_ROOT, Settings
from ldpstream.runtime.specs import publish_spec
from ldpstream.runtime.tokens import Scope
from ldpstream.simulator.population import PopulationTruth
from ldpstream.simulator.simulator import fleet
from tests.readapi.test_api import http_get, serving, token_verifier
from tests.tokens import api_tokens


@dataclass(frozen=True)
class Windows:
    """A store with `starts` windows of the spec's first length, and each window's exact truth (by start)."""

    spec: CollectionSpec
    store: StatsStore
    starts: list[int]
    truths: dict[int, dict[str, object]]


def simulated_windows(spec: CollectionSpec, first_start_ms: int, count: int, devices: int, seed: int = 0,
                      every: int = 1, store: StatsStore | None = None) -> Windows:
    """`count` windows of `spec.windows[0]`, every `every`-th from `first_start_ms`, `devices` reports each, in
    `store` (default: a new MemoryStore)."""
    assert spec.partitions == 1
    plan = Plan(spec)
    length = window_seconds(spec.windows[0]) * 1000
    store, clock = store or MemoryStore(), [first_start_ms]
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (spec.name, spec.version) else None,  # type: ignore[arg-type, return-value]
                                   lambda: clock[0])
    starts, truths = [], {}
    for i in range(count):
        start = first_start_ms + i * every * length
        clock[0] = start + length // 2
        truth = PopulationTruth(spec)
        messages = []
        for records, reports in fleet(spec, devices, seed=seed * 100_000 + i, chunk=devices, clock_ms=lambda: clock[0],
                                      strategies={}):
            truth.add(records)
            messages.append(Message(len(starts) + len(messages), encode(reports)))
        result = processor.process(spec.topic, messages)
        assert result.update is not None and store.apply(result.update).status == "applied"
        starts.append(start)
        truths[start] = truth.to_dict()
    return Windows(spec, store, starts, truths)


@dataclass(frozen=True)
class SeriesApi:
    """The read API on a real socket over `simulated_windows` of a spec published to the real Kafka."""

    url: str
    windows: Windows
    token: str  # scope read
    metrics_token: str  # scope metrics only

    @property
    def name(self) -> str:
        return self.windows.spec.name

    def get(self, path: str, token: str | None = "read") -> tuple[int, str, str]:
        """(status, content type, body) of a GET with the read token (`token`: another token, or None for none)."""
        return http_get(self.url + path, self.token if token == "read" else token)

    def json(self, path: str, status: int = 200) -> Any:
        code, content_type, body = self.get(path)
        assert (code, content_type) == (status, "application/json"), body
        return json.loads(body)


@contextmanager
def series_api(cfg: Settings, count: int = 30, devices: int = 300, every: int = 1,
               example: str = "diagnostics.yaml") -> Iterator[SeriesApi]:
    """The spec `examples/<example>` with 1m and 1h windows, published under a unique name on one partition; `count`
    one-minute windows of `devices` reports each, every `every`-th minute up to the current one, in a MemoryStore
    served by the real app (tokens in the real Redis)."""
    spec = load_spec(PROJECT_ROOT / "examples" / example).replace(
        name=f"test-series-{uuid.uuid4().hex[:10]}", partitions=1, windows=["1m", "1h"])
    publish_spec(spec, cfg.bootstrap)
    minute = 60_000
    windows = simulated_windows(spec, (now_ms() // minute - (count - 1) * every) * minute, count, devices, every=every)
    app = create_app(windows.store, PublishedPlans(PlanRegistry(cfg.bootstrap)), TopicEnds(cfg.bootstrap), {},
                     tokens=token_verifier(cfg))
    try:
        with api_tokens(cfg.redis) as tokens, serving(app) as url:
            yield SeriesApi(url, windows, tokens.issue([Scope.READ]).token, tokens.issue([Scope.METRICS]).token)
    finally:
        delete_topic(cfg.bootstrap, spec.topic)
