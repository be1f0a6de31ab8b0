"""Key-value records on the device side: mappings or pairs arrays in, bad ones refused with the attribute's name; the
simulator's population and its truth; the collector's estimates with k of d attributes sampled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.contract.collector import collector_for
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import decode_envelope
from ldpstream.device.perturb import RecordError, perturb, true_columns
from ldpstream.device.sdk import Device
from ldpstream.simulator.population import Population, PopulationTruth

SPEC = parse_spec("""
name: kv
version: 1
epsilon: 4
sampling: one
attributes:
  - {name: usage, type: keyvalue, keys: [a, b, c, d], range: [0, 60], mechanism: pckv-ue, padding: 4,
     pairs_per_device: 1.5}
  - {name: crashes, type: numeric, range: [0, 20]}
""")
OPEN = parse_spec("""
name: kv-open
version: 1
epsilon: 1
attributes:
  - {name: usage, type: keyvalue, buckets: 4, range: [0, 1]}
""")


def test_mappings_become_a_pairs_array_of_codes() -> None:
    columns = true_columns(SPEC, {"usage": [{"b": 30.0, "a": 0}, {}, {3: 60}], "crashes": np.array([1.0, 2, 3])}, 3)
    pairs = columns["usage"]
    assert pairs.shape == (3, 2, 2)
    assert pairs[0].tolist() == [[1.0, 30.0], [0.0, 0.0]] and pairs[1, :, 0].tolist() == [-1, -1]
    assert pairs[2, 0].tolist() == [3.0, 60.0]


@pytest.mark.parametrize(("usage", "problem"), [
    ([{"z": 1.0}], "unknown key"),
    ([{"a": 61.0}], "outside its range"),
    ([{"a": math.nan}], "outside its range"),
    ([{"a": "ten"}], "pairs are"),
    ([{4: 1.0}], "unknown key"),
    (np.array([[[0.5, 1.0]]]), "integer codes"),
    (np.array([[[0.0, -1.0]]]), "outside its range"),
    (np.zeros((1, 2)), "expected 1 sets of pairs"),
    ("a=1", "mappings"),
])
def test_bad_records_are_refused_naming_the_attribute(usage: object, problem: str) -> None:
    with pytest.raises(RecordError, match=problem) as info:
        true_columns(SPEC, {"usage": usage, "crashes": np.array([1.0])}, 1)  # type: ignore[dict-item]
    assert "usage" in str(info.value)


def test_a_key_held_twice_is_refused() -> None:
    with pytest.raises(RecordError, match="twice"):
        perturb(SPEC, np.array([1], dtype=np.uint64), np.array([0]),
                {"usage": np.array([[[1.0, 5.0], [1.0, 6.0]]]), "crashes": np.array([1.0])},
                np.random.default_rng(0))


def test_an_open_domain_keeps_the_first_key_of_a_bucket() -> None:
    attr = OPEN.attributes[0]
    names = [f"app{i}" for i in range(10)]
    same = [n for n in names if attr.code_of(n) == attr.code_of(names[0])]  # type: ignore[union-attr]
    assert len(same) >= 2
    pairs = true_columns(OPEN, {"usage": [{same[0]: 0.25, same[1]: 0.75}]}, 1)["usage"]
    assert pairs[0].tolist() == [[attr.code_of(same[0]), 0.25]]  # type: ignore[union-attr]


def test_population_truth_is_the_records() -> None:
    population, truth = Population(SPEC, seed=3), PopulationTruth(SPEC)
    usage = population.sample(10_000, np.random.default_rng(0))["usage"]
    truth.add({"usage": usage, "crashes": np.zeros(10_000)})
    assert usage.ndim == 3 and ((usage[:, :, 1] >= 0) & (usage[:, :, 1] <= 60)).all()
    held = usage[:, :, 0] >= 0
    assert (held[:, :-1] >= held[:, 1:]).all()  # held keys first
    sorted_keys = np.sort(np.where(held, usage[:, :, 0], -1 - np.arange(usage.shape[1])), axis=1)
    assert not (sorted_keys[:, 1:] == sorted_keys[:, :-1]).any()  # no key twice
    keys, values = usage[:, :, 0][held].astype(int), usage[:, :, 1][held]
    counts = np.bincount(keys, minlength=4)
    got = truth.to_dict()["attributes"]["usage"]
    assert [got["frequencies"][k] for k in "abcd"] == pytest.approx(counts / 10_000, rel=1e-12)
    assert [got["means"][k] for k in "abcd"] == pytest.approx(np.bincount(keys, values, 4) / counts, rel=1e-12)
    assert 1.0 < held.sum() / 10_000 < 2.0  # about pairs_per_device = 1.5 pairs a device


def test_collector_estimates_with_attribute_sampling_within_4_standard_errors() -> None:
    """k = 1 of d = 2: the frequencies are scaled by d/k with the sampling term, the means are not scaled."""
    rng = np.random.default_rng(5)
    population, truth = Population(SPEC, seed=4), PopulationTruth(SPEC)
    records = population.sample(300_000, rng)
    truth.add(records)
    collector = collector_for(SPEC)
    estimate = collector.estimate(collector.accumulate(collector.perturb(true_columns(SPEC, records, 300_000),
                                                                        rng)))["usage"]
    true = truth.to_dict()["attributes"]["usage"]
    freqs, means = np.array(list(true["frequencies"].values())), np.array(list(true["means"].values()))
    assert np.all(np.abs(estimate.value[0] - freqs) <= 4 * estimate.stderr[0])
    assert np.all(np.abs(estimate.value[1] - means) <= 4 * estimate.stderr[1])
    assert np.all(estimate.stderr[1] < 5.0)  # minutes on [0, 60]: informative


def test_a_device_reports_its_pairs_through_the_sdk() -> None:
    device = Device(SPEC, 7, rng=np.random.default_rng(1))
    envelope = decode_envelope(device.report({"usage": {"b": 12.0, "d": 59.5}, "crashes": 2.0}))
    assert envelope.collection == "kv" and len(envelope.attributes) == 1  # k = 1 of the 2 attributes
    with pytest.raises(RecordError, match="unknown key"):
        Device(SPEC, 8).report({"usage": {"e": 1.0}, "crashes": 2.0})
