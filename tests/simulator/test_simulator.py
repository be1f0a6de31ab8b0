"""The fleet simulator: exact truth, the distributions of 000 Sec. VI, unique pseudonyms, reports on their partition."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from ldpstream.contract.collector import collector_for
from ldpstream.contract.pseudonym import device_partitions, device_pseudonym, integer_pseudonyms
from ldpstream.contract.wire import decode, encode
from ldpstream.device.perturb import row_range, select_rows
from ldpstream.device.sdk import Device
from ldpstream.mechanisms.hashing import mix64
from ldpstream.simulator.population import (
    POWER_LAW_EXPONENT,
    Population,
    PopulationTruth,
    power_law,
    truncated_gaussian,
)
from ldpstream.simulator.simulator import chunk_messages, encode_within, fleet
from tests.specs import as_mixed, mixed_spec


def test_truth_is_exactly_the_generated_population() -> None:
    spec = mixed_spec()
    chunks = list(fleet(spec, 10_007, seed=3, chunk=1000, clock_ms=lambda: 1_700_000_000_000))
    truth = PopulationTruth(spec)
    for records, _ in chunks:
        truth.add(records)
    result = truth.to_dict()
    everything = {name: np.concatenate([r[name] for r, _ in chunks]) for name in chunks[0][0]}
    assert result["devices"] == 10_007
    for a in spec.attributes:
        got = result["attributes"][a.name]  # type: ignore[index]
        if a.type == "numeric":
            assert got == {"mean": pytest.approx(float(np.mean(everything[a.name])), rel=1e-13)}
            lo, hi = a.range  # type: ignore[union-attr]
            assert everything[a.name].min() >= lo and everything[a.name].max() <= hi
        else:
            counts = np.bincount(everything[a.name], minlength=len(a.values))  # type: ignore[union-attr]
            assert got == {"frequencies": {v: c / 10_007 for v, c in zip(a.values, counts, strict=True)}}  # type: ignore[union-attr]


def test_fleet_chunks_pseudonyms_and_clock() -> None:
    spec = mixed_spec()
    chunks = list(fleet(spec, 2500, seed=1, chunk=1000, clock_ms=lambda: 42))
    assert [len(b) for _, b in chunks] == [1000, 1000, 500]
    devices = np.concatenate([b.devices for _, b in chunks])
    assert len(np.unique(devices)) == 2500
    assert all((b.timestamps_ms == 42).all() for _, b in chunks)
    first_of_seed_1 = integer_pseudonyms(spec.name, np.array([2**32], dtype=np.uint64))[0]
    assert devices[0] == first_of_seed_1  # device i of seed s has id s * 2^32 + i
    other_seed = np.concatenate([b.devices for _, b in fleet(spec, 2500, seed=2, chunk=1000)])
    assert not np.intersect1d(devices, other_seed).size
    with pytest.raises(ValueError, match="seed"):
        next(fleet(spec, 10, seed=-1))


def test_pseudonyms() -> None:
    ids = np.arange(100_000, dtype=np.uint64)
    assert len(np.unique(mix64(ids))) == len(ids)
    assert device_pseudonym("a", 5) == int(integer_pseudonyms("a", np.array([5]))[0])
    assert device_pseudonym("a", 5) != device_pseudonym("b", 5)  # unlinkable across collections
    assert device_pseudonym("a", "phone-1") == device_pseudonym("a", "phone-1") != device_pseudonym("a", "phone-2")
    assert 0 <= device_pseudonym("a", "phone-1") < 2**64
    for bad in (-1, 2**64, "", 1.5, True):
        with pytest.raises(ValueError):
            device_pseudonym("a", bad)  # type: ignore[arg-type]


def _mean_and_sd(density: object) -> tuple[float, float]:
    mass = integrate.quad(density, -1, 1)[0]  # type: ignore[arg-type]
    mean = integrate.quad(lambda x: x * density(x), -1, 1)[0] / mass  # type: ignore[operator]
    second = integrate.quad(lambda x: x * x * density(x), -1, 1)[0] / mass  # type: ignore[operator]
    return mean, float(np.sqrt(second - mean**2))


@pytest.mark.parametrize("kind", ["gaussian", "power_law"])
def test_distributions_match_their_densities(kind: str) -> None:
    """Sample mean within 4 standard errors of the density's mean, computed by quadrature (000 Sec. VI-A)."""
    n, rng = 200_000, np.random.default_rng(5)
    if kind == "gaussian":
        mu = 0.7  # far enough from 0 that the truncation at 1 moves the mean
        x = truncated_gaussian(mu, 0.25, n, rng)
        mean, sd = _mean_and_sd(lambda t: np.exp(-0.5 * ((t - mu) / 0.25) ** 2))
        assert mean < mu - 0.01
    else:
        x = power_law(n, rng)
        mean, sd = _mean_and_sd(lambda t: (t + 2) ** -POWER_LAW_EXPONENT)
    assert x.min() >= -1 and x.max() <= 1
    assert abs(x.mean() - mean) <= 4 * sd / np.sqrt(n)
    assert abs(x.std() - sd) <= 0.02 * sd


def test_categorical_population_is_zipf() -> None:
    spec = mixed_spec()
    n = 200_000
    codes = Population(spec, 0).sample(n, np.random.default_rng(0))["network"]
    p = np.arange(1, 7, dtype=float) ** -1.3
    p /= p.sum()
    freq = np.bincount(codes, minlength=6) / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n))


def test_envelopes_over_the_size_limit_are_halved_without_losing_a_report() -> None:
    spec = mixed_spec(sampling="split")
    collector = collector_for(spec)
    (_, batch), = fleet(spec, 999, seed=0, chunk=999)
    whole = encode(batch)
    parts = encode_within(batch, len(whole) // 3)
    assert len(parts) == 4 and all(len(p) <= len(whole) // 3 for p in parts)
    decoded = [decode(p) for p in parts]
    np.testing.assert_array_equal(np.concatenate([d.devices for d in decoded]), batch.devices)
    total = sum(collector.accumulate(as_mixed(spec, d)) for d in decoded)
    np.testing.assert_allclose(total, collector.accumulate(as_mixed(spec, decode(whole))), rtol=1e-12)
    assert encode_within(batch, len(whole)) == [whole]
    with pytest.raises(ValueError, match="not inside"):
        row_range(batch, 5, 5)


@pytest.mark.parametrize("single", [False, True])
def test_every_report_goes_to_its_devices_partition_once(single: bool) -> None:
    spec = mixed_spec(sampling="split")  # 2 partitions
    collector = collector_for(spec)
    (_, batch), = fleet(spec, 301, seed=4, chunk=301)
    messages = list(chunk_messages(spec, batch, "k", single))
    assert len(messages) == (301 if single else spec.partitions)
    decoded = [(p, decode(v)) for p, _, v in messages]
    for p, d in decoded:
        assert (device_partitions(d.devices, spec.partitions) == p).all()
    devices = np.concatenate([d.devices for _, d in decoded])
    assert sorted(devices.tolist()) == sorted(batch.devices.tolist())
    total = sum(collector.accumulate(as_mixed(spec, d)) for _, d in decoded)
    np.testing.assert_allclose(total, collector.accumulate(as_mixed(spec, decode(encode(batch)))), rtol=1e-12)


def test_selected_rows_keep_their_reports() -> None:
    spec = mixed_spec(sampling="split")
    (_, batch), = fleet(spec, 50, seed=5, chunk=50)
    rows = np.array([0, 3, 4, 17, 49])
    picked = decode(encode(select_rows(batch, rows)))
    whole = decode(encode(batch))
    assert picked.devices.tolist() == whole.devices[rows].tolist()
    for block, full in zip(picked.attributes, whole.attributes, strict=True):
        mine = np.isin(full.rows, rows)
        assert block.rows.tolist() == np.searchsorted(rows, full.rows[mine]).tolist()
        for name, column in block.reports.items():
            assert column.tolist() == full.reports[name][mine].tolist()


def test_a_device_sends_to_its_partition() -> None:
    sent: list[tuple[str, bytes, bytes | None, int | None]] = []

    class Capture:
        def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
            sent.append((topic, value, key, partition))

    spec = mixed_spec()
    for device_id in ["a", "b", "c", "d", "e"]:
        device = Device(spec, device_id, Capture())  # type: ignore[arg-type]
        device.report({"battery_level": 50.0, "memory_used": 100.0, "screen_minutes": 3.0, "display_mode": "dark",
                       "network": "wifi"})
    for _, value, _, partition in sent:
        assert device_partitions(decode(value).devices, spec.partitions).tolist() == [partition]
    assert len({p for *_, p in sent}) == spec.partitions
