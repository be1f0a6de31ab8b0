"""perturb: validated records in, mechanism output out, and only that can reach the wire."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.contract.collector import collector_for, resolved_mechanisms, sampled_count
from ldpstream.contract.spec import CollectionSpec
from ldpstream.contract.wire import decode, encode
from ldpstream.device.perturb import RecordError, perturb, single_reports
from tests.specs import as_mixed, mixed_spec

N = 4


def records(**changes: object) -> dict[str, np.ndarray]:
    base = {"battery_level": np.array([0.0, 42.123456789, 99.5, 100.0]),
            "memory_used": np.array([1024.5, 0.0, 8192.0, 4000.25]),
            "screen_minutes": np.array([3, 60, 1440, 0]),
            "display_mode": np.array(["dark", "light", "auto", "dark"]),
            "network": np.array([0, 5, 2, 1])}
    base.update({k: np.asarray(v) for k, v in changes.items()})
    return base


def run(spec: CollectionSpec, recs: dict[str, np.ndarray], seed: int = 7) -> bytes:
    batch = perturb(spec, np.arange(N, dtype=np.uint64), np.full(N, 1_700_000_000_000), recs,
                    np.random.default_rng(seed))
    return encode(batch)


def test_collector_follows_the_spec() -> None:
    assert sampled_count(mixed_spec(epsilon=2.0)) == 1
    assert sampled_count(mixed_spec(epsilon=8.0)) == 3  # floor(8 / 2.5), 000 Eq. 12
    assert sampled_count(mixed_spec(sampling="one", epsilon=8.0)) == 1
    assert sampled_count(mixed_spec(sampling="split")) == 5
    assert sampled_count(mixed_spec(sampling=2)) == 2
    split = collector_for(mixed_spec(sampling="split"))
    assert split.k == 5 and all(m.epsilon == pytest.approx(2.0 / 5) for m in split.mechanisms.values())
    assert collector_for(mixed_spec()) is collector_for(mixed_spec())  # cached per content
    fixed = mixed_spec().replace(attributes=[
        a.replace(mechanism="pm" if a.type == "numeric" else "oue") for a in mixed_spec().attributes])
    assert set(resolved_mechanisms(fixed).values()) == {"pm", "oue"}


def test_reports_are_mechanism_output_in_the_declared_range(spec: CollectionSpec) -> None:
    decoded = decode(run(spec, records()))
    assert decoded.collection == spec.name and decoded.spec_version == spec.version
    batch = as_mixed(spec, decoded)
    assert sum(len(r) for r in batch.rows.values()) == N * sampled_count(spec)
    for name, schema in collector_for(spec).schemas.items():
        assert (schema.violations(batch.reports[name]) == "").all()


def test_raw_values_never_reach_the_wire(spec: CollectionSpec) -> None:
    """The one-attribute reports of a split collection carry no true value's bytes (all attributes reported)."""
    message = run(mixed_spec(sampling="split"), records())
    for value in (42.123456789, 1024.5, 4000.25):  # distinctive true values, every one reported
        assert np.float64(value).tobytes() not in message
        assert np.float32(value).tobytes() not in message
    assert np.float64((42.123456789 - 50) / 50).tobytes() not in message  # nor a value on [-1, 1]


def test_seeded_determinism_and_string_or_code_categories(spec: CollectionSpec) -> None:
    assert run(spec, records(), seed=3) == run(spec, records(), seed=3)
    assert run(spec, records(), seed=3) != run(spec, records(), seed=4)
    as_codes = records(display_mode=np.array([1, 0, 2, 1]))
    assert run(spec, as_codes, seed=5) == run(spec, records(), seed=5)


@pytest.mark.parametrize(("recs", "message"), [
    ({k: v for k, v in records().items() if k != "network"}, r"lack attributes \['network'\]"),
    ({**records(), "colour": np.zeros(N)}, r"unknown ones \['colour'\]"),
    (records(battery_level=[1.0, np.nan, 2.0, 3.0]), "'battery_level': NaN"),
    (records(memory_used=[1.0, 8192.5, 2.0, 3.0]), r"'memory_used': value 8192.5 outside its range \[0.0, 8192.0\]"),
    (records(screen_minutes=[-1, 0, 0, 0]), "'screen_minutes': value -1.0 outside"),
    (records(display_mode=["dark", "sepia", "light", "dark"]), "'display_mode': unknown category 'sepia'"),
    (records(network=[0, 6, 1, 1]), r"'network': unknown category code 6 \(codes are 0..5\)"),
    (records(network=[0.0, 1.0, 1.0, 1.0]), "'network': categories are value strings or integer codes"),
    (records(battery_level=[1.0, 2.0, 3.0]), r"'battery_level': expected 4 values .* shape \(3,\)"),
    (records(battery_level=["a", "b", "c", "d"]), "'battery_level': numeric values expected"),
])
def test_bad_records_are_refused_with_the_attribute_named(spec: CollectionSpec, recs: dict, message: str) -> None:
    with pytest.raises(RecordError, match=message):
        run(spec, recs)


def test_bad_devices_and_timestamps(spec: CollectionSpec) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(RecordError, match="devices must be"):
        perturb(spec, np.array([-1, 2, 3, 4]), np.zeros(N, np.int64), records(), rng)
    with pytest.raises(RecordError, match="timestamps_ms must be 4 integer milliseconds"):
        perturb(spec, np.arange(N, dtype=np.uint64), np.zeros(N), records(), rng)


def test_single_reports_split_a_batch_row_by_row(spec: CollectionSpec) -> None:
    spec3 = mixed_spec(sampling=3)
    batch = perturb(spec3, np.arange(10, 10 + N, dtype=np.uint64), np.arange(N) + 5, records(),
                    np.random.default_rng(1))
    whole = as_mixed(spec3, decode(encode(batch)))
    singles = [as_mixed(spec3, decode(encode(one))) for one in single_reports(batch)]
    assert [int(decode(encode(one)).devices[0]) for one in single_reports(batch)] == [10, 11, 12, 13]
    collector = collector_for(spec3)
    total = sum(collector.accumulate(one) for one in singles)
    np.testing.assert_allclose(total, collector.accumulate(whole), rtol=1e-12)
    assert all(sum(len(r) for r in one.rows.values()) == 3 for one in singles)


@pytest.mark.parametrize("sampling", ["auto", "split"])
def test_estimates_through_the_wire_are_unbiased(sampling: str) -> None:
    """perturb -> encode -> decode -> accumulate: each estimate within 4.5 standard errors of the truth."""
    spec = mixed_spec(sampling=sampling, epsilon=4.0)
    rng = np.random.default_rng(11)
    n = 40_000
    recs = {"battery_level": rng.uniform(20, 90, n), "memory_used": rng.uniform(0, 2000, n),
            "screen_minutes": rng.uniform(0, 1440, n) ** 0.5,
            "display_mode": rng.choice(3, n, p=[0.6, 0.3, 0.1]), "network": rng.choice(6, n)}
    collector = collector_for(spec)
    stats = collector.empty_stats()
    for lo in range(0, n, 5000):
        part = {k: v[lo:lo + 5000] for k, v in recs.items()}
        batch = perturb(spec, np.arange(lo, lo + 5000, dtype=np.uint64), np.zeros(5000, np.int64), part, rng)
        stats += collector.accumulate(as_mixed(spec, decode(encode(batch))))
    estimates = collector.estimate(stats)
    for a in spec.attributes:
        truth = (recs[a.name].mean() if a.type == "numeric"
                 else np.bincount(recs[a.name], minlength=len(a.values)) / n)  # type: ignore[union-attr]
        est = estimates[a.name]
        assert est.n == n
        assert np.all(np.abs(est.value - truth) <= 4.5 * est.stderr), (a.name, est.value, truth, est.stderr)
