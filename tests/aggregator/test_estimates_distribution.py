"""A numeric attribute's distribution on read: simulated devices through the worker's processing into a store, then
the "distribution" entry the API serves; asking one of an attribute that has none is a clear error; no Kafka."""

from __future__ import annotations

import time

import numpy as np
import pytest
from rich.console import Console

from ldpstream.aggregator.dedupe import SeenDevices
from ldpstream.aggregator.estimates import attribute_distribution, collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore
from ldpstream.cli.output import estimates_table
from ldpstream.contract.spec import SpecError, load_spec, parse_spec
from ldpstream.contract.wire import encode
from ldpstream.device.perturb import by_partition
from ldpstream.mechanisms.distribution.base import DEFAULT_QUANTILES
from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.simulator.simulator import fleet

SPEC = load_spec(PROJECT_ROOT / "examples" / "request_latency.yaml")
KEYS = {"method", "reports", "grid", "density", "probabilities", "cdf", "cdf_stderr", "quantiles", "mean",
        "stderr_method", "details"}


@pytest.fixture(scope="module")
def aggregated() -> tuple[MemoryStore, Plan, np.ndarray]:
    """The store after the worker's processing of 100000 simulated devices, and their true request_ms values."""
    plan, store = Plan(SPEC), MemoryStore()
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (SPEC.name, SPEC.version) else None,
                                   lambda: int(time.time() * 1000))
    seen, values = SeenDevices(store), []
    offsets = dict.fromkeys(range(SPEC.partitions), 0)
    for records, batch in fleet(SPEC, 100_000, seed=7, chunk=25_000):
        values.append(np.asarray(records["request_ms"], dtype=np.float64))
        for partition, part in by_partition(batch, SPEC.partitions):
            result = processor.process(SPEC.topic, [Message(offsets[partition], encode(part), partition=partition)],
                                       seen)
            offsets[partition] += 1
            assert result.update is not None and store.apply(result.update).status == "applied"
            seen.commit(SPEC.topic, result.update, int(time.time() * 1000))
    return store, plan, np.concatenate(values)


def test_the_distribution_entry_is_on_the_attribute_scale_and_near_the_truth(aggregated) -> None:
    store, plan, values = aggregated
    entry = collection_estimates(store, plan)["attributes"]["request_ms"]
    dist = entry["distribution"]
    assert set(dist) == KEYS and dist["method"] == "sw-ems" and entry["mechanism"] == "sw"
    grid = np.array(dist["grid"])
    assert grid.shape == (65,) and grid[0] == 0.0 and grid[-1] == pytest.approx(2000.0)
    cdf = np.array(dist["cdf"])
    assert cdf[0] == 0.0 and cdf[-1] == pytest.approx(1.0) and np.all(np.diff(cdf) >= 0)
    assert np.array(dist["density"]) @ np.diff(grid) == pytest.approx(1.0)
    truth = np.searchsorted(np.sort(values), grid, side="right") / values.size
    assert np.abs(cdf - truth).max() < 0.05  # EMS's smoothing bias at the power law's peak dominates
    assert set(dist["quantiles"]) == {f"{q:g}" for q in DEFAULT_QUANTILES}
    median = dist["quantiles"]["0.5"]
    assert abs(median["estimate"] - np.median(values)) < 40 and median["stderr"] > 0  # 2% of the range
    # the sampled devices (one attribute of two each) are the distribution's reports; the mean stays unbiased
    assert 0.4 * values.size < dist["reports"] < 0.6 * values.size
    assert abs(entry["mean"] - values.mean()) <= 4 * entry["stderr"]
    console = Console(width=200, record=True)
    console.print(estimates_table(collection_estimates(store, plan), {"attributes": {"request_ms": {}}}))
    text = console.export_text()
    assert "request_ms" in text and "quantile 0.5" in text


def test_one_attribute_s_distribution_with_chosen_quantiles(aggregated) -> None:
    store, plan, _ = aggregated
    result = attribute_distribution(store, plan, "request_ms", levels=(0.5, 0.9))
    assert result["attribute"] == "request_ms" and result["window"] == "all"
    assert set(result["distribution"]["quantiles"]) == {"0.5", "0.9"}


def test_a_distribution_of_another_kind_of_attribute_is_a_clear_error(aggregated) -> None:
    store, plan, _ = aggregated
    with pytest.raises(SpecError, match="'network_type' is categorical: distributions and quantiles are estimated "
                                        "for numeric attributes only"):
        attribute_distribution(store, plan, "network_type")
    with pytest.raises(SpecError, match="has no attribute 'nope'"):
        attribute_distribution(store, plan, "nope")
    diagnostics = Plan(load_spec(PROJECT_ROOT / "examples" / "diagnostics.yaml"))
    with pytest.raises(SpecError, match="gives its mean only"):
        attribute_distribution(MemoryStore(), diagnostics, "battery_level")
    assert "distribution" not in collection_estimates(MemoryStore(), diagnostics)["attributes"]["battery_level"]


def test_no_reports_no_distribution() -> None:
    plan = Plan(SPEC)
    assert collection_estimates(MemoryStore(), plan)["attributes"]["request_ms"]["distribution"] is None
    assert attribute_distribution(MemoryStore(), plan, "request_ms")["distribution"] is None


def test_a_hierarchical_histogram_attribute_through_the_worker() -> None:
    """The same path with `mechanism: hh`: the CDF at every edge within 4 of its standard errors of the truth."""
    text = (PROJECT_ROOT / "examples" / "request_latency.yaml").read_text()
    spec = parse_spec(text.replace("mechanism: sw, parameters: {bins: 64}", "mechanism: hh, parameters: {bins: 16}"))
    plan, store = Plan(spec), MemoryStore()
    processor = PartitionProcessor(lambda n, v, _: plan, lambda: int(time.time() * 1000))
    seen, values = SeenDevices(store), []
    for offset, (records, batch) in enumerate(fleet(spec, 40_000, seed=8, chunk=40_000)):
        values.append(np.asarray(records["request_ms"], dtype=np.float64))
        for partition, part in by_partition(batch, spec.partitions):
            result = processor.process(spec.topic, [Message(offset, encode(part), partition=partition)], seen)
            assert result.update is not None and store.apply(result.update).status == "applied"
    entry = collection_estimates(store, plan)["attributes"]["request_ms"]
    dist, truth_values = entry["distribution"], np.concatenate(values)
    assert entry["mechanism"] == "hh" and dist["method"] == "hh" and len(dist["grid"]) == 17
    truth = np.searchsorted(np.sort(truth_values), dist["grid"], side="right") / truth_values.size
    gap = np.abs(np.array(dist["cdf"]) - truth)[1:-1]
    assert np.all(gap <= 4 * np.array(dist["cdf_stderr"])[1:-1]), gap
