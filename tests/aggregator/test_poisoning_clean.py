"""On a clean window the defended estimate is the live one, for every mechanism a spec can name (issue 36: a numeric
attribute whose mean lies below the middle of its range has a negative sum, which the defence once clipped to zero,
showing a defended mean of 720 beside a live one of 88.6 with nothing set aside).

Each mechanism of the registry is run through the worker's processing into a memory store, two windows of a skewed
population (a reference and the window read), and the window's defence is read as `ldp estimate` reads it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import WindowDefence, window_defence
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import MemoryStore, WindowStats
from ldpstream.contract.spec import CollectionSpec, parse_spec
from ldpstream.contract.wire import encode
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.poisoning.base import SUSPECTED
from ldpstream.simulator.simulator import fleet

MINUTE = 60_000
START = 1_700_000_040_000 // MINUTE * MINUTE
DEVICES = 3_000  # per window: above the policy's 1,000 reports, so the tests run
SKEWED = {"numeric": {"range": [0, 1440], "distribution": "power_law"},  # mean far below the middle: a negative sum
          "categorical": {"values": [f"v{i}" for i in range(8)], "zipf_exponent": 1.3},
          "keyvalue": {"keys": ["a", "b", "c", "d"], "range": [0, 600], "padding": 2},
          "string": {"max_length": 4, "alphabet": "abc", "top": 5, "distinct": 20}}


def _kind(name: str) -> str:
    if name in registry.KEYVALUE:
        return "keyvalue"
    if name in registry.HEAVY_HITTERS:
        return "string"
    if name in registry.FREQUENCY or (name in registry.LONGITUDINAL and registry.takes_domain(name)):
        return "categorical"
    return "numeric"


# every mechanism an attribute of a spec can name (the open-domain sketches are the trees' parts, named by none)
NAMES = sorted({*registry.NUMERIC, *registry.FREQUENCY, *registry.LONGITUDINAL, *registry.KEYVALUE,
                *registry.HEAVY_HITTERS, *registry.DISTRIBUTION})


def spec_of(name: str) -> CollectionSpec:
    privacy = {"privacy": {"per_report": 2.0, "lifetime": 8.0}} if name in registry.LONGITUDINAL else {"epsilon": 2.0}
    attribute = {"name": "x", "type": _kind(name), "mechanism": name, **SKEWED[_kind(name)]}
    return parse_spec(json.dumps({"name": "clean", "version": 1, **privacy, "sampling": 1, "partitions": 1,
                                  "windows": ["1m"], "attributes": [attribute]}))


def _windows(name: str, windows: int) -> tuple[Plan, MemoryStore, WindowStats, WindowDefence]:
    """`windows` windows of one population (fresh noise each) through the worker's processing; the last one's
    statistics and its defence as `ldp estimate` reads them."""
    spec = spec_of(name)
    plan, store = Plan(spec), MemoryStore()
    last = START + (windows - 1) * MINUTE
    now = START
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (spec.name, 1) else None, lambda: now)
    for w in range(windows):
        now = START + max(1, w) * MINUTE  # each window's reports while it is recent
        _, reports = next(fleet(spec, DEVICES, seed=1, chunk=DEVICES, clock_ms=lambda w=w: START + w * MINUTE,
                                  report_round=w))  # one population, fresh noise
        result = processor.process(spec.topic, [Message(w, encode(reports))])
        assert result.update is not None and store.apply(result.update).status == "applied"
    stats = store.read_window(spec.name, 1, "1m", last, plan.sizes)
    return plan, store, stats, window_defence(store, plan, "1m", last, stats)


@pytest.mark.parametrize("name", NAMES)
def test_a_clean_windows_defended_estimate_is_the_live_one(name: str) -> None:
    plan, _, stats, defence = _windows(name, 2)
    assert defence.reference_windows == 1
    _assert_clean(plan, stats, defence)


@pytest.mark.parametrize("name", ["hcms_tree", "pem"])  # the prefix trees (sfp has no cap)
def test_a_clean_tree_window_capped_by_its_lagged_windows_too_is_the_live_one(name: str) -> None:
    """A tree's cap reads the lagged windows of the tests over windows (the block test's 8 before the latest 4, the
    long block test's before the latest 10: 4 here) as references too; an honest window is still not suspected, and
    its defended estimate is the live one."""
    plan, _, stats, defence = _windows(name, 14)
    assert defence.reference_windows == 4
    cap = defence.attributes[0].cap
    assert cap is not None and len(cap.lagged) == 2
    _assert_clean(plan, stats, defence)
    assert plan.estimate(defence.defended, caps=defence.caps)["x"].items  # the capped decode reads them


def _assert_clean(plan: Plan, stats: WindowStats, defence: WindowDefence) -> None:
    assert defence.attributes[0].status != SUSPECTED, defence.attributes[0].findings  # an honest window
    live, defended = plan.estimate(stats)["x"], plan.estimate(defence.defended)["x"]
    np.testing.assert_array_equal(np.asarray(defended.value), np.asarray(live.value))
    np.testing.assert_array_equal(np.asarray(defended.stderr), np.asarray(live.stderr))
    for j, block in stats.stats.items():
        np.testing.assert_array_equal(defence.defended.stats[j], block)
    assert defence.defended.devices == stats.devices


def test_every_mechanism_a_spec_names_is_covered() -> None:
    """The list above is the registry's: a new mechanism is tested here without a line changed."""
    assert set(NAMES) >= set(registry.known_names())
