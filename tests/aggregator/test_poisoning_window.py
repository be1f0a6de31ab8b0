"""A window's suspected poisoning on read and in an audit, over the worker's pure processing into a memory store
(no Kafka): the live figure against earlier windows, the audit's set-aside reports and record, what `ldp estimate`,
the API and the metrics show, and that nothing of it touches the counted statistics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rich.console import Console

from ldpstream.aggregator.audit import audit_reports, collect
from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import (
    audit_records,
    chain,
    decode_record,
    encode_record,
    window_defence,
)
from ldpstream.aggregator.processing import Message, PartitionProcessor
from ldpstream.aggregator.store import ALL_TIME, MemoryStore, WindowStats
from ldpstream.cli.output import poisoning_table
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import AttributeColumns, encode_envelope, envelope_of
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.readapi.metrics import StoreCollector
from ldpstream.simulator.poisoning import fake_frequency_reports
from ldpstream.simulator.population import zipf_probabilities

D = 32
VALUES = [f"v{i}" for i in range(D)]
SPEC = parse_spec(json.dumps({"name": "poison-window", "version": 1, "epsilon": 2.0, "sampling": 1, "partitions": 1,
                              "windows": ["1m"], "attributes": [{"name": "item", "type": "categorical",
                                                                 "values": VALUES, "mechanism": "oue"}]}))
MINUTE = 60_000
START = 1_700_000_040_000 // MINUTE * MINUTE  # three windows: two honest, the third attacked
N, M = 20_000, 1_000
TARGETS = np.array([20, 24, 27, 29, 31])


def messages(reports: dict[str, np.ndarray], devices: np.ndarray, time_ms: int, first_offset: int) -> list[Message]:
    """Envelopes of 500 reports, as the edge writes them."""
    out = []
    for i, lo in enumerate(range(0, len(devices), 500)):
        hi = min(len(devices), lo + 500)
        cols = {k: v[lo:hi] for k, v in reports.items()}
        env = envelope_of(SPEC.name, 1, devices[lo:hi], np.full(hi - lo, time_ms),
                          {0: AttributeColumns(np.arange(hi - lo, dtype=np.uint32), cols)})
        out.append(Message(first_offset + i, encode_envelope(env)))
    return out


@pytest.fixture(scope="module")
def filled() -> tuple[MemoryStore, Plan, list[Message]]:
    """The store after the worker's processing of the three windows; the attacked window's messages."""
    rng = np.random.default_rng(7)
    plan, store = Plan(SPEC), MemoryStore()
    oracle = plan.mechanisms[0]
    assert isinstance(oracle, FrequencyOracle)
    processor = PartitionProcessor(lambda n, v, _: plan if (n, v) == (SPEC.name, 1) else None,
                                   lambda: START + 2000)  # the later windows within the allowed clock skew
    offset, attacked = 0, []
    for w in range(3):
        values = rng.choice(D, size=N - (M if w == 2 else 0), p=zipf_probabilities(D, 1.0))
        reports = oracle.perturb(values, rng)
        if w == 2:
            fakes = fake_frequency_reports(oracle, "maximal_gain", TARGETS, M, rng)
            reports = {k: np.concatenate([reports[k], fakes[k].astype(reports[k].dtype)]) for k in reports}
        devices = np.arange(1, N + 1, dtype=np.uint64) + w * 10 * N
        batch = messages(reports, devices, START + w * MINUTE + 1000, offset)
        offset += len(batch)
        result = processor.process(SPEC.topic, batch)
        assert result.update is not None and store.apply(result.update).status == "applied"
        if w == 2:
            attacked = batch
    return store, plan, attacked


def test_the_live_figure_flags_the_attacked_window_and_defends_its_targets(
        filled: tuple[MemoryStore, Plan, list[Message]]) -> None:
    store, plan, _ = filled
    honest = collection_estimates(store, plan, f"1m:{START + MINUTE}")["poisoning"]
    assert honest["source"] == "live" and not honest["alert"] and honest["set_aside"] == 0
    result = collection_estimates(store, plan, f"1m:{START + 2 * MINUTE}")
    p = result["poisoning"]
    assert p["source"] == "live" and p["reference"] == {"windows": 2, "reports": 2 * N}
    assert p["alert"] and p["set_aside_fraction"] > p["alert_threshold"]
    entry = p["attributes"]["item"]
    assert {VALUES[t] for t in TARGETS} <= set(entry["suspects"]) and entry["gain_removed"] > 0
    for t in TARGETS:  # the defended estimate is below the live one
        label = VALUES[t]
        assert entry["estimate"]["frequencies"][label]["estimate"] < result["attributes"]["item"]["frequencies"][
            label]["estimate"]
    first = collection_estimates(store, plan, f"1m:{START}")["poisoning"]
    assert first["reference"] is None  # the first window has none: only the impossible is tested


def test_an_audit_sets_aside_the_fakes_and_readers_show_its_record(
        filled: tuple[MemoryStore, Plan, list[Message]]) -> None:
    store, plan, attacked = filled
    key = (1, "1m", START + 2 * MINUTE)
    before = store.read_window(SPEC.name, 1, "1m", key[2], plan.sizes)
    outcomes = store.outcomes(SPEC.name)
    reports = collect(plan, attacked, "1m", key[2])
    assert reports.reports == N
    reference = window_defence(store, plan, "1m", key[2])  # only for its reference's size
    assert reference.reference_windows == 2
    found = chain(store, plan, "1m", key[2], audit_records(store, plan))
    count = found.windows
    audit = audit_reports(plan, before, reports, found.reference, count, drift=found.drift)
    rows = {(m.offset, r) for m in audit.set_aside for r in m.rows or ()}
    fake_rows = {(attacked[i // 500].offset, i % 500) for i in range(N - M, N)}
    assert fake_rows <= rows  # every MGA fake supports all 5 targets: set aside, as its message's rows
    assert len(rows - fake_rows) <= N * 1e-3 + 4 * (N * 1e-3) ** 0.5  # genuine ones: within the stated rate
    assert all(letter.reason == "suspected_poisoning" for letter in audit.set_aside)
    store.put_poisoning(SPEC.name, key, encode_record(key, audit.attributes, 123, audit.reports, len(audit.set_aside),
                                                      count))
    after = store.read_window(SPEC.name, 1, "1m", key[2], plan.sizes)
    assert all(np.array_equal(before.stats[j], after.stats[j]) for j in before.stats)  # the statistics untouched
    assert store.outcomes(SPEC.name) == outcomes
    p = collection_estimates(store, plan, f"1m:{key[2]}")["poisoning"]
    assert p["source"] == "audit" and p["audited_ms"] == 123 and p["alert"]
    assert abs(p["set_aside"] - len(rows)) < 1e-6 or p["set_aside"] >= len(rows)
    everything = collection_estimates(store, plan, ALL_TIME)["poisoning"]
    assert everything["source"] == "audit" and everything["set_aside"] >= len(rows)  # the all-time window sums it
    console = Console(width=200, record=True)
    console.print(poisoning_table(collection_estimates(store, plan, f"1m:{key[2]}")))
    assert "ALERT" in console.export_text()


def test_collect_keeps_what_the_worker_counted() -> None:
    plan = Plan(SPEC)
    oracle = plan.mechanisms[0]
    rng = np.random.default_rng(1)
    reports = oracle.perturb(rng.integers(0, D, size=6), rng)
    devices = np.array([1, 2, 3, 1, 4, 5], dtype=np.uint64)  # device 1 twice: its first report counts
    times = np.array([0, 0, 0, 0, 0, MINUTE]) + START + 1000  # the last is in the next window
    bad = dict(reports)
    bad["bits"] = bad["bits"].copy()
    bad["bits"][4, 0] = 7  # out of range: the worker refused that row
    env = envelope_of(SPEC.name, 1, devices, times, {0: AttributeColumns(np.arange(6, dtype=np.uint32), bad)})
    garbage = Message(1, b"\x93not an envelope")
    got = collect(plan, [Message(0, encode_envelope(env)), garbage], "1m", START)
    assert got.reports == 3  # rows 0, 1, 2 (row 3 repeats device 1, row 4 is out of range, row 5 is elsewhere)
    assert got.attributes[0][1].tolist() == [0, 1, 2]


def test_a_record_that_cannot_be_read_is_ignored() -> None:
    assert decode_record(b"junk") is None
    assert decode_record(json.dumps({"record": 99}).encode()) is None
    assert decode_record(json.dumps({"record": 1, "attributes": {"0": [{"status": "bogus"}]}}).encode()) is None


def test_the_metrics_carry_the_suspected_poisoning(filled: tuple[MemoryStore, Plan, list[Message]]) -> None:
    store, plan, _ = filled
    collector = StoreCollector(store, lambda: [plan], lambda topics: {})
    samples = {(m.name, tuple(sorted(s.labels.items()))): s.value for m in collector.collect() for s in m.samples}
    assert samples[("ldp_poisoning_alert_threshold", (("collection", SPEC.name),))] == pytest.approx(0.005)
    assert ("ldp_poisoning_alert", (("collection", SPEC.name), ("window", "1m"))) in samples
    assert any(name == "ldp_poisoning_gain_removed" for name, _ in samples)


def test_a_shuffled_collections_anonymous_reports_are_all_tested() -> None:
    """The shuffler's batches carry device 0 and the window's start: no dedupe, every report in the window kept, and
    the itemset test needs no device to find the fakes."""
    raw = {**json.loads(SPEC.canonical_json()), "name": "poison-shuffled",
           "shuffle": {"delta": 1e-8, "min_batch": 1000, "grace_s": 5}}
    plan = Plan(parse_spec(json.dumps(raw)))
    oracle = plan.mechanisms[0]
    assert isinstance(oracle, FrequencyOracle)
    rng = np.random.default_rng(2)
    reports = oracle.perturb(rng.choice(D, size=N - M, p=zipf_probabilities(D, 1.0)), rng)
    fakes = fake_frequency_reports(oracle, "maximal_gain", TARGETS, M, rng)
    reports = {k: np.concatenate([reports[k], fakes[k].astype(reports[k].dtype)]) for k in reports}
    env = envelope_of(plan.spec.name, 1, np.zeros(N, dtype=np.uint64), np.full(N, START),
                      {0: AttributeColumns(np.arange(N, dtype=np.uint32), reports)})
    window = collect(plan, [Message(0, encode_envelope(env))], "1m", START)
    assert window.reports == N
    live = WindowStats(float(N), {0: attribute_block(N, oracle.accumulate(reports))})
    audit = audit_reports(plan, live, window, None)
    flagged = {r for letter in audit.set_aside for r in letter.rows or ()}
    assert set(range(N - M, N)) <= flagged
