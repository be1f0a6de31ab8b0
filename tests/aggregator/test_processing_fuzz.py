"""The micro-batch processor on untrusted bytes: valid messages mixed with mutated ones and arbitrary bytes. It never
raises, every message is counted in the outcomes or dead-lettered, and every valid device is accepted exactly once;
a message the vectorised steps cannot handle costs the batch only that message."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from unittest.mock import ANY

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ldpstream.aggregator.dedupe import SeenDevices
from ldpstream.aggregator.plans import Plan as SpecPlan
from ldpstream.aggregator.processing import MALFORMED, REASONS, Message, PartitionProcessor, PartitionResult
from ldpstream.aggregator.store import MemoryStore
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import AttributeReports, WireError, decode, encode, perturbed_batch
from ldpstream.device.perturb import perturb
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Reports
from ldpstream.mechanisms.numeric.piecewise import Piecewise
from ldpstream.simulator.population import Population
from tests.aggregator.test_processing import Plan
from tests.fuzzing import isolations, mutate

NOW = 1_800_000_000_000
TOPIC = "ldp.reports.fuzz"
PARTITIONS = 2
SPEC = parse_spec(f"""
name: fuzz
version: 1
epsilon: 2
sampling: 1
windows: [1h]
partitions: {PARTITIONS}
attributes:
  - {{name: level, type: numeric, range: [0, 100], mechanism: pm}}
  - {{name: mode, type: categorical, values: [a, b, c], mechanism: grr}}
""")


PLAN = Plan(SPEC, (registry.make("pm", 2.0), registry.make("grr", 2.0, domain=3)))
# The attribute types whose reports are sets or strings: key-value pairs, and strings by a tree and by SFP.
OPEN_SPEC = parse_spec(f"""
name: fuzz
version: 1
epsilon: 4
sampling: 1
windows: [1h]
partitions: {PARTITIONS}
attributes:
  - {{name: usage, type: keyvalue, keys: [a, b, c, d], range: [0, 60], mechanism: pckv-ue, padding: 2}}
  - {{name: word, type: string, max_length: 4, alphabet: abc, top: 3, mechanism: pem, distinct: 20}}
  - {{name: app, type: string, max_length: 4, alphabet: abc, top: 3, mechanism: sfp, distinct: 20}}
""")
OPEN_PLAN = SpecPlan(OPEN_SPEC)


def processor(plan: Plan | SpecPlan = PLAN) -> PartitionProcessor:
    return PartitionProcessor(lambda name, version, _: plan if (name, version) == ("fuzz", 1) else None, lambda: NOW)


def valid_value(devices: np.ndarray, rng: np.random.Generator, plan: Plan | SpecPlan = PLAN) -> bytes:
    """An envelope of these devices: each reports one attribute (k = 1), in the spec's hour (the open spec's by the
    devices' own perturbation of a simulated population)."""
    if plan is OPEN_PLAN:
        records = Population(OPEN_SPEC, 3).sample(len(devices), rng)
        return encode(perturb(OPEN_SPEC, devices.astype(np.uint64), np.full(len(devices), NOW), records, rng))
    attribute = rng.integers(0, 2, len(devices))
    blocks = []
    for a, mechanism in enumerate(plan.mechanisms):
        rows = np.flatnonzero(attribute == a)
        if len(rows):
            values = rng.uniform(-1, 1, len(rows)) if a == 0 else rng.integers(0, 3, len(rows))
            blocks.append(AttributeReports(a, rows, mechanism.perturb(values, rng)))
    return encode(perturbed_batch("fuzz", 1, devices.astype(np.uint64), np.full(len(devices), NOW), tuple(blocks)))


@dataclass(frozen=True)
class Batch:
    """A micro-batch in offset order per partition, and the devices its valid messages carry."""

    messages: list[Message]
    valid_devices: np.ndarray


def mixed_batch(seed: int, valid: int, bad: int, plan: Plan | SpecPlan = PLAN) -> Batch:
    """`valid` messages of 1-3 fresh devices each (on their devices' partition) and `bad` mutations of them or
    arbitrary bytes (on any partition), in a random order."""
    rng = np.random.default_rng(seed)
    mutator = random.Random(seed)
    devices = rng.permutation(10_000)[:3 * valid].astype(np.uint64) + 1
    placed: list[tuple[int, bytes]] = []
    used: list[np.ndarray] = []
    for i in range(valid):
        part = int(rng.integers(0, PARTITIONS))
        mine = devices[devices % PARTITIONS == part][3 * i // PARTITIONS:][:int(rng.integers(1, 4))]
        mine = mine[~np.isin(mine, np.concatenate(used))] if used else mine
        if len(mine):
            used.append(mine)
            placed.append((part, valid_value(mine, rng, plan)))
    originals = [value for _, value in placed] or [valid_value(np.array([1], dtype=np.uint64), rng, plan)]
    for _ in range(bad):
        value = (mutate(mutator.choice(originals), mutator) if mutator.random() < 0.9
                 else mutator.randbytes(mutator.randint(0, 64)))
        placed.insert(mutator.randint(0, len(placed)), (mutator.randrange(PARTITIONS), value))
    offsets: Counter[int] = Counter()
    messages = []
    for part, value in placed:
        messages.append(Message(offsets[part], value, partition=part))
        offsets[part] += 1
    return Batch(messages, np.concatenate(used) if used else np.zeros(0, dtype=np.uint64))


def assert_accounted(batch: Batch, result: PartitionResult) -> None:
    """Every message is counted in the outcomes (its rows accepted or rejected) or dead-lettered whole, and every
    valid device is accepted exactly once."""
    update = result.update
    assert update is not None
    keys = {(m.partition, m.offset): m for m in batch.messages}
    whole = Counter((d.partition, d.offset) for d in result.dead_letters if d.rows is None)
    assert set(whole) <= set(keys) and max(whole.values(), default=1) == 1
    rejected_rows: dict[tuple[int, int], list[int]] = {}
    for d in result.dead_letters:
        assert d.reason in REASONS and d.value == keys[(d.partition, d.offset)].value
        if d.rows is not None:
            assert (d.partition, d.offset) not in whole
            rejected_rows.setdefault((d.partition, d.offset), []).extend(d.rows)
    rows_in = {k: len(decode(m.value)) for k, m in keys.items() if k not in whole}
    for k, rows in rejected_rows.items():
        assert len(rows) == len(set(rows)) and all(0 <= r < rows_in[k] for r in rows)
    row_rejects = sum(len(rows) for rows in rejected_rows.values())
    assert update.outcomes.get("accepted", 0) == sum(rows_in.values()) - row_rejects
    # a message rejected whole counts once if it was rejected as a message, or once per row if each row was
    rejected = sum(n for key, n in update.outcomes.items() if key.startswith("rejected:"))
    most = sum(max(1, len(_decoded_or_empty(keys[k].value))) for k in whole)
    assert len(whole) + row_rejects <= rejected <= most + row_rejects
    assert {(r.source.rpartition(":")[2], r.first, r.last) for r in update.ranges} == {
        (str(p), min(o for q, o in keys if q == p), max(o for q, o in keys if q == p)) for p, _ in keys}
    # one report per device and hour window: a mutated timestamp can put a device's second report in another hour
    hour = [w for w in update.windows if w.window == "1h"]
    per_window = [np.concatenate([*(w.dedupe or {}).values(), np.zeros(0, np.uint64)]) for w in hour]
    assert all(len(d) == len(np.unique(d)) for d in per_window)
    counted = np.concatenate([*per_window, np.zeros(0, np.uint64)])
    assert len(counted) == update.outcomes.get("accepted", 0)
    assert np.isin(batch.valid_devices, counted).all()


def _decoded_or_empty(value: bytes) -> np.ndarray:
    try:
        return decode(value).devices
    except WireError:
        return np.zeros(0, dtype=np.uint64)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 8), st.integers(0, 12))
@example(34008059, 1, 1)  # a device's second report, its timestamp mutated into the previous hour: counted there
def test_mixed_batches_never_raise_and_every_message_is_accounted_for(seed: int, valid: int, bad: int) -> None:
    batch = mixed_batch(seed, valid, bad)
    if not batch.messages:
        return
    with isolations("ldpstream.aggregator.processing") as isolated:
        result = processor().process(TOPIC, batch.messages, SeenDevices(MemoryStore()))
    assert_accounted(batch, result)
    assert not isolated, [d.detail for d in isolated]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(0, 8), st.integers(0, 12))
def test_keyvalue_and_string_batches_never_raise_and_every_message_is_accounted_for(seed: int, valid: int,
                                                                                   bad: int) -> None:
    batch = mixed_batch(seed, valid, bad, OPEN_PLAN)
    if not batch.messages:
        return
    with isolations("ldpstream.aggregator.processing") as isolated:
        result = processor(OPEN_PLAN).process(TOPIC, batch.messages, SeenDevices(MemoryStore()))
    assert_accounted(batch, result)
    assert not isolated, [d.detail for d in isolated]


def collection_with_invalid_utf8() -> bytes:
    """Regression: a valid-looking envelope whose collection string is not UTF-8."""
    return msgspec.msgpack.encode([1, msgspec.Raw(b"\xa2\xc3\x28"), 1, b"\0" * 8, b"\0" * 8, []])


def test_a_collection_name_with_invalid_utf8_is_dead_lettered_as_malformed() -> None:
    good = Message(0, valid_value(np.array([2], dtype=np.uint64), np.random.default_rng(0)))
    result = processor().process(TOPIC, [good, Message(1, collection_with_invalid_utf8())])
    assert [(d.offset, d.reason) for d in result.dead_letters] == [(1, MALFORMED)]
    assert "UnicodeDecodeError" in result.dead_letters[0].detail
    assert result.update is not None and result.update.outcomes == {"accepted": 1, f"rejected:{MALFORMED}": 1}


class RaisesOnOne(Piecewise):
    """PM, except that accumulating a report of exactly 1.0 raises: a stand-in for a bug the checks miss."""

    def accumulate(self, reports: Reports) -> np.ndarray:
        if (np.asarray(reports["value"]) == 1.0).any():
            raise ZeroDivisionError("a report of 1.0")
        return super().accumulate(reports)


class RaisesOnOpposites(Piecewise):
    """PM, except that accumulating reports of 1.0 and -1.0 together raises: a failure only two messages cause."""

    def accumulate(self, reports: Reports) -> np.ndarray:
        values = np.asarray(reports["value"])
        if (values == 1.0).any() and (values == -1.0).any():
            raise FloatingPointError("1.0 and -1.0 together")
        return super().accumulate(reports)


def numeric(offset: int, device: int, value: float) -> Message:
    """One device reporting the numeric attribute with this PM report value."""
    batch = perturbed_batch("fuzz", 1, np.array([device], dtype=np.uint64), np.array([NOW]),
                            (AttributeReports(0, np.zeros(1, np.int64), {"value": np.array([value])}),))
    return Message(offset, encode(batch), partition=device % PARTITIONS)


def test_a_message_the_vectorised_path_raises_on_is_isolated_and_the_rest_counted() -> None:
    messages = [numeric(0, 2, 0.5), numeric(1, 4, 1.0), numeric(2, 6, -1.0), numeric(3, 8, 0.25)]
    result = processor(Plan(SPEC, (RaisesOnOne(2.0), PLAN.mechanisms[1]))).process(TOPIC, messages)
    assert [(d.offset, d.reason, d.rows) for d in result.dead_letters] == [(1, MALFORMED, None)]
    assert result.dead_letters[0].detail == "ZeroDivisionError: a report of 1.0"
    assert result.update is not None
    assert result.update.outcomes == {"accepted": 3, f"rejected:{MALFORMED}": 1}
    assert [r.last for r in result.update.ranges] == [3]  # the isolated message's offset is applied too


def test_a_failure_only_messages_together_cause_takes_out_the_later_ones() -> None:
    messages = [numeric(0, 2, -1.0), numeric(1, 4, 0.5), numeric(2, 6, 1.0), numeric(3, 8, 1.0)]
    result = processor(Plan(SPEC, (RaisesOnOpposites(2.0), PLAN.mechanisms[1]))).process(TOPIC, messages)
    assert [(d.offset, d.reason, d.detail) for d in result.dead_letters] == [
        (2, MALFORMED, "FloatingPointError: 1.0 and -1.0 together"), (3, MALFORMED, ANY)]
    assert result.update is not None and result.update.outcomes == {"accepted": 2, f"rejected:{MALFORMED}": 2}


class Unreachable(ConnectionError):
    """What a store lookup raises while Redis is down."""


class DownSeen:
    def contains(self, topic: str, partition: int, key: object, devices: np.ndarray) -> np.ndarray:
        raise Unreachable("redis is down")

    def synced(self, topic: str, partition: int) -> int:
        return -1


def test_a_failing_lookup_of_seen_devices_is_raised_not_blamed_on_messages() -> None:
    with pytest.raises(Unreachable, match="redis is down"):
        processor().process(TOPIC, [numeric(0, 2, 0.5), numeric(1, 4, 0.25)], DownSeen())
