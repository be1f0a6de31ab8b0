"""A keyvalue attribute's estimates on read: the worker's processing into a store, then the JSON the API serves,
the CLI's table and the post-processed (clipped) means; no Kafka."""

from __future__ import annotations

import time

from rich.console import Console

from ldpstream.aggregator.dedupe import SeenDevices
from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore
from ldpstream.cli.output import estimates_table
from ldpstream.contract.pseudonym import device_partitions
from ldpstream.contract.spec import load_spec
from ldpstream.contract.wire import encode
from ldpstream.device.perturb import by_partition
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.simulator.population import PopulationTruth
from ldpstream.simulator.simulator import fleet

SPEC = load_spec(PROJECT_ROOT / "examples" / "app_usage.yaml")


def aggregated(devices: int) -> tuple[MemoryStore, Plan, dict]:  # type: ignore[type-arg]
    """The store after the worker's processing of a simulated fleet (one message per partition and chunk)."""
    plan, store = Plan(SPEC), MemoryStore()
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (SPEC.name, SPEC.version) else None,
                                   lambda: int(time.time() * 1000))
    seen, truth = SeenDevices(store), PopulationTruth(SPEC)
    offsets = dict.fromkeys(range(SPEC.partitions), 0)
    for records, batch in fleet(SPEC, devices, seed=5, chunk=20_000):
        truth.add(records)
        for partition, part in by_partition(batch, SPEC.partitions):
            assert (device_partitions(part.devices, SPEC.partitions) == partition).all()
            message = Message(offsets[partition], encode(part), partition=partition)
            offsets[partition] += 1
            result = processor.process(SPEC.topic, [message], seen)
            assert result.update is not None and store.apply(result.update).status == "applied"
            seen.commit(SPEC.topic, result.update, int(time.time() * 1000))
    return store, plan, truth.to_dict()


def test_keyvalue_estimates_render_frequencies_and_means_within_4_standard_errors() -> None:
    store, plan, truth = aggregated(100_000)
    result = collection_estimates(store, plan)
    entry = result["attributes"]["screen_minutes"]
    true = truth["attributes"]["screen_minutes"]
    assert set(entry["frequencies"]) == set(entry["means"]) == set(SPEC.attributes[0].keys)  # type: ignore[union-attr]
    for kind in ("frequencies", "means"):
        for key, e in entry[kind].items():
            assert e["stderr"] is not None and e["stderr"] > 0
            assert abs(e["estimate"] - true[kind][key]) <= 4 * e["stderr"], (kind, key, e, true[kind][key])
    clipped = collection_estimates(store, plan, postprocess="clip")["attributes"]["screen_minutes"]["postprocessed"]
    assert all(0 <= m <= 600 for m in clipped["means"].values()) and len(clipped["means"]) == 8
    console = Console(width=200, record=True)
    console.print(estimates_table(result, truth))
    text = console.export_text()
    assert "chat mean" in text and "crashes" in text


def test_no_reports_estimate_nothing_for_a_keyvalue_attribute() -> None:
    entry = collection_estimates(MemoryStore(), Plan(SPEC))["attributes"]["screen_minutes"]
    assert all(e["estimate"] is None and e["stderr"] is None for e in entry["means"].values())
    assert all(e["estimate"] is None for e in entry["frequencies"].values())
