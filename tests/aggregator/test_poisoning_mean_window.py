"""A numeric attribute's tests over windows as a reader sees them (issue 42): after BLOCK_WINDOWS - 1 + LAG_WINDOWS
honest windows in a memory store, a window whose mean jumps is found by the block test too, on the read path
(`collection_estimates`, what `ldp estimate` and `ldp poisoning status` show), its suspect named "mean", and its
defended mean held at or under the lagged windows' mean."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from ldpstream.aggregator.audit import closed_windows
from ldpstream.aggregator.estimates import collection_estimates
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.poisoning import Acceptance, accept, acceptances, encode_record, window_defence
from ldpstream.aggregator.store import BatchUpdate, MemoryStore, OffsetRange, WindowIncrement
from ldpstream.cli.output import poisoning_table
from ldpstream.contract.spec import parse_spec
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.poisoning.numeric import MEAN
from ldpstream.mechanisms.poisoning.sequential import BLOCK, BLOCK_WINDOWS, LAG_WINDOWS
from ldpstream.simulator.population import truncated_gaussian

SPEC = parse_spec(json.dumps({"name": "mean-window", "version": 1, "epsilon": 1.0, "sampling": 1, "partitions": 1,
                              "windows": ["1m"], "attributes": [{"name": "x", "type": "numeric", "range": [-1, 1],
                                                                 "mechanism": "pm"}]}))
MINUTE = 60_000
START = 1_700_000_040_000 // MINUTE * MINUTE
N = 5_000


def test_a_jump_of_the_mean_is_found_by_the_block_test_on_the_read_path() -> None:
    """The last window's mean raised by 20 standard deviations of one window's: its block (it and the 3 honest
    windows before) is 5 sd above the 8 lagged windows, 5 / sqrt(1/4 + 1/8) = 8.2 sd of the block test's
    statistic, over its 4.06 by 4; the window's own bound finds it too, and the defended mean is held at the
    nearer of the two levels: at or under the lagged windows' mean, up to the rounding of the reports set aside."""
    plan, store = Plan(SPEC), MemoryStore()
    mech = plan.mechanisms[0]
    assert isinstance(mech, NumericMechanism)
    rng = np.random.default_rng(4)
    history = BLOCK_WINDOWS - 1 + LAG_WINDOWS
    blocks = []
    for w in range(history + 1):
        reports = mech.perturb(truncated_gaussian(0.0, 0.25, N, rng), rng)["value"]
        if w == history:
            sd = float(np.std(reports)) / np.sqrt(N)
            reports = reports + 20 * sd  # the sums of a window whose mean is 20 sd higher
        blocks.append(attribute_block(N, mech.accumulate({"value": reports})))
        update = BatchUpdate(SPEC.name, (OffsetRange("t:0", w, w),),
                             (WindowIncrement(1, "1m", START + w * MINUTE, N, {0: blocks[-1]}),), {})
        assert store.apply(update).status == "applied"
    result = collection_estimates(store, plan, f"1m:{START + history * MINUTE}")
    entry = result["poisoning"]["attributes"]["x"]
    found = {f["detector"]: f for f in entry["findings"] if f["status"] == "suspected"}
    assert {BLOCK, MEAN} <= set(found), entry["findings"]
    assert found[BLOCK]["detail"].startswith(f"1 shifted over the last {BLOCK_WINDOWS} windows against the "
                                             f"{LAG_WINDOWS} before (up: 1, down: 0)")
    assert entry["suspects"] == ["mean"] and result["poisoning"]["alert"]
    lagged = np.sum(blocks[:LAG_WINDOWS], axis=0)
    level = float(mech.estimate(lagged[1:]).value)
    assert entry["estimate"]["mean"] <= level + mech.output_range[1] / N
    assert poisoning_table(result).row_count > 0


def test_an_accepted_new_level_is_no_longer_held() -> None:
    """A genuine lasting shift (the population's mean moves from 0 to 0.3, about 10 sd of a window's mean, and
    stays) is held like an attack: the third window after it is suspected and its defended mean stays near the old
    level. Accepted from the first shifted window (`accept`), its references are the shifted windows before it, so
    nothing is found and the defended mean is the window's own; an audit record of a shifted window made before the
    acceptance no longer counts, one made after it does."""
    plan, store = Plan(SPEC), MemoryStore()
    mech = plan.mechanisms[0]
    assert isinstance(mech, NumericMechanism)
    rng = np.random.default_rng(5)
    history, shifted = BLOCK_WINDOWS - 1 + LAG_WINDOWS, 3
    for w in range(history + shifted):
        values = truncated_gaussian(0.3 if w >= history else 0.0, 0.25, N, rng)
        block = attribute_block(N, mech.accumulate(mech.perturb(values, rng)))
        update = BatchUpdate(SPEC.name, (OffsetRange("t:0", w, w),),
                             (WindowIncrement(1, "1m", START + w * MINUTE, N, {0: block}),), {})
        assert store.apply(update).status == "applied"
    last, first_shifted = START + (history + shifted - 1) * MINUTE, START + history * MINUTE

    def read(start: int) -> dict[str, Any]:
        return collection_estimates(store, plan, f"1m:{start}")["poisoning"]  # type: ignore[no-any-return]

    raw = float(mech.estimate(store.read_window(SPEC.name, 1, "1m", last, plan.sizes).stats[0][1:]).value)
    held = read(last)
    assert held["alert"] and held["attributes"]["x"]["estimate"]["mean"] < raw - 0.2
    middle = START + (history + 1) * MINUTE  # audited before the acceptance: its record holds the shift
    wd = window_defence(store, plan, "1m", middle)
    assert wd.attributes[0].set_aside > 0
    store.put_poisoning(SPEC.name, (1, "1m", middle), encode_record((1, "1m", middle), wd.attributes, 1_000, N, 0, 4))
    closed = last + 10 * MINUTE
    assert ("1m", middle) not in closed_windows(store, plan, closed)
    accept(store, plan, "1m", 0, first_shifted, 2_000)
    assert ("1m", middle) in closed_windows(store, plan, closed)  # the auditor makes it again
    assert acceptances(store, plan, "1m") == {0: Acceptance(first_shifted, 2_000)}
    now = read(last)
    assert not now["alert"] and now["reference"]["windows"] == 2
    assert now["attributes"]["x"]["accepted_from_ms"] == first_shifted
    assert held["attributes"]["x"]["accepted_from_ms"] is None
    assert now["attributes"]["x"]["estimate"]["mean"] == pytest.approx(raw)
    assert read(middle)["source"] == "live" and read(middle)["set_aside"] == 0
    assert read(first_shifted)["reference"] is None  # the first accepted window has none
    store.put_poisoning(SPEC.name, (1, "1m", middle), encode_record((1, "1m", middle), wd.attributes, 3_000, N, 0, 4))
    assert read(middle)["source"] == "audit" and read(middle)["set_aside"] > 0  # an audit after it counts
    assert ("1m", middle) not in closed_windows(store, plan, closed)
    with pytest.raises(ValueError, match="not the start"):
        accept(store, plan, "1m", 0, first_shifted + 1, 2_000)


@pytest.mark.parametrize("data", [b"\xff\xfe", b"", b"null", b"[]", b'"x"', b"{}", b'{"from_ms": 0}',
                                  b'{"from_ms": 1e400, "accepted_ms": 1}', b'{"from_ms": NaN, "accepted_ms": 1}',
                                  b'{"from_ms": 60000.5, "accepted_ms": 1}', b'{"from_ms": true, "accepted_ms": 1}',
                                  b'{"from_ms": "60000", "accepted_ms": 1}', b'{"from_ms": 60000, "accepted_ms": [1]}',
                                  b'{"from_ms": 60000, "accepted_ms": 1'])
def test_an_acceptance_that_cannot_be_read_is_ignored(data: bytes) -> None:
    """A store entry that is not an acceptance this version wrote (arbitrary bytes, a mutated record) is ignored, as
    an unreadable audit record is: the attribute keeps its history, and reading a window does not fail."""
    plan, store = Plan(SPEC), MemoryStore()
    store.put_acceptance(SPEC.name, "v1:1m:a0", data)
    assert acceptances(store, plan, "1m") == {}
    assert collection_estimates(store, plan, f"1m:{START}")["poisoning"]["attributes"]["x"]["accepted_from_ms"] is None


def test_a_written_acceptance_reads_back_and_mutations_of_it_do_not_crash() -> None:
    """Every single-byte mutation of a valid acceptance either reads back as two integers or is ignored."""
    plan, store = Plan(SPEC), MemoryStore()
    accept(store, plan, "1m", 0, START, 7)
    (member, valid), = store.acceptances(SPEC.name).items()
    assert acceptances(store, plan, "1m") == {0: Acceptance(START, 7)}
    rng = np.random.default_rng(3)
    for i in range(len(valid)):
        mutated = bytearray(valid)
        mutated[i] = int(rng.integers(0, 256))
        store.put_acceptance(SPEC.name, member, bytes(mutated))
        found = acceptances(store, plan, "1m")
        assert found == {} or (isinstance(found[0].from_ms, int) and isinstance(found[0].accepted_ms, int))
