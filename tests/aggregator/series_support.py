"""A store holding many windows of simulated reports with their exact truths, for the series tests.

Each window gets its own fleet (a seed per window, so its own devices and true records), stamped inside the window,
encoded as the devices send it and aggregated by the real `PartitionProcessor` with its clock set to that time (so
no report is stale), all on partition 0 of a one-partition spec.
"""

from __future__ import annotations

from dataclasses import dataclass

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import CollectionSpec, window_seconds
from ldpstream.contract.wire import encode
from ldpstream.simulator.population import PopulationTruth
from ldpstream.simulator.simulator import fleet


@dataclass(frozen=True)
class Windows:
    """A store with `starts` windows of the spec's first length, and each window's exact truth (by start)."""

    spec: CollectionSpec
    store: MemoryStore
    starts: list[int]
    truths: dict[int, dict[str, object]]


def simulated_windows(spec: CollectionSpec, first_start_ms: int, count: int, devices: int, seed: int = 0,
                      every: int = 1) -> Windows:
    """`count` windows of `spec.windows[0]`, every `every`-th from `first_start_ms`, `devices` reports each."""
    assert spec.partitions == 1
    plan = Plan(spec)
    length = window_seconds(spec.windows[0]) * 1000
    store, clock = MemoryStore(), [first_start_ms]
    processor = PartitionProcessor(lambda n, v: plan if (n, v) == (spec.name, spec.version) else None,  # type: ignore[arg-type, return-value]
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
