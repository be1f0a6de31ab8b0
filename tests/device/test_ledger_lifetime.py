"""The ledger over a device's lifetime: memos charged once, the odometer, refusal past the lifetime budget, the
secret and the memos surviving an app restart (the device state file), a device whose value changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpstream.contract.spec import parse_spec
from ldpstream.device.ledger import BudgetExceeded, Memo, PrivacyLedger
from ldpstream.device.sdk import Device

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000 // HOUR_MS * HOUR_MS
SPEC = parse_spec("""
name: usage
version: 1
privacy: {per_report: 1.0, lifetime: 4.0, values: 2}
windows: [1h]
attributes: [{name: category, type: categorical, values: [a, b, c, d, e, f], mechanism: l-grr}]
""")
FRESH = parse_spec("""
name: fresh
version: 1
epsilon: 0.5
attributes: [{name: level, type: numeric, range: [0, 1]}]
""")


def device(path: Path) -> Device:
    """A device of SPEC without a transport (what it would send is returned by `report`)."""
    return Device(SPEC, "phone-1", ledger=PrivacyLedger.open(path), rng=np.random.default_rng(), strategies={})


def test_a_memo_is_charged_once_and_the_window_every_report() -> None:
    ledger = PrivacyLedger()
    memo = Memo("category/x/0", 2.0)
    for hour in range(30):
        ledger.charge(SPEC, T0 + hour * HOUR_MS, memos=[memo])
        assert ledger.spent(SPEC, T0 + hour * HOUR_MS) == 1.0
    assert ledger.lifetime_spent("usage") == 2.0 and ledger.memos("usage") == {"category/x/0": 2.0}


def test_without_a_privacy_block_the_odometer_adds_every_report() -> None:
    ledger = PrivacyLedger()
    for hour in range(10):
        ledger.charge(FRESH, T0 + hour * HOUR_MS)
    assert ledger.lifetime_spent("fresh") == pytest.approx(10 * 0.5, rel=1e-12)
    with pytest.raises(ValueError, match="no memos"):
        ledger.charge(FRESH, T0 + 11 * HOUR_MS, memos=[Memo("level/x/0", 1.0)])


def test_the_report_that_would_exceed_the_lifetime_is_refused_and_charges_nothing() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0, memos=[Memo("category/x/0", 2.0)])
    ledger.charge(SPEC, T0 + HOUR_MS, memos=[Memo("category/x/1", 2.0)])  # a second value: 2 eps_inf = 4
    with pytest.raises(BudgetExceeded, match=r"lifetime spend to 6 > the collection's lifetime budget 4 \(already "
                                             r"spent 4 on 2 memo"):
        ledger.charge(SPEC, T0 + 2 * HOUR_MS, memos=[Memo("category/x/2", 2.0)])
    assert ledger.lifetime_spent("usage") == 4.0 and ledger.spent(SPEC, T0 + 2 * HOUR_MS) == 0.0
    ledger.charge(SPEC, T0 + 2 * HOUR_MS, memos=[Memo("category/x/0", 2.0)])  # a value paid for goes on
    with pytest.raises(ValueError, match="names the memos"):
        ledger.check(SPEC, T0 + 3 * HOUR_MS)


def test_memoization_survives_a_restart_of_the_device_state_file(tmp_path: Path) -> None:
    path = tmp_path / "device.json"
    phone = device(path)
    for hour in range(3):
        phone.report({"category": "c"}, T0 + hour * HOUR_MS)
    secret = phone.ledger.secret("usage")
    restarted = device(path)  # the app restarts: everything it knows is in the state file
    assert restarted.ledger.secret("usage") == secret
    restarted.report({"category": "c"}, T0 + 3 * HOUR_MS)
    assert restarted.ledger.lifetime_spent("usage") == 2.0 and len(restarted.ledger.memos("usage")) == 1
    # the memo is a function of the secret: a device that lost its file would draw every memo afresh
    assert device(tmp_path / "lost.json").ledger.secret("usage") != secret
    with pytest.raises(BudgetExceeded, match="window"):
        restarted.report({"category": "c"}, T0 + 3 * HOUR_MS + 1)  # the window's spend survived too
    saved = json.loads(path.read_text())["collections"]["usage"]
    assert saved["secret"] == f"{secret:016x}" and saved["lifetime_spent"] == 2.0


def test_j_distinct_values_cost_j_eps_inf_until_the_lifetime_is_spent(tmp_path: Path) -> None:
    phone = device(tmp_path / "device.json")
    spent = []
    for hour, value in enumerate(["a", "a", "b", "a", "b"]):  # two distinct values: 2 x eps_inf = 2 x 2
        phone.report({"category": value}, T0 + hour * HOUR_MS)
        spent.append(phone.ledger.lifetime_spent("usage"))
    assert spent == [2.0, 2.0, 4.0, 4.0, 4.0]
    with pytest.raises(BudgetExceeded, match="lifetime"):
        phone.report({"category": "d"}, T0 + 5 * HOUR_MS)  # a third value would spend 6 > 4
    phone.report({"category": "a"}, T0 + 5 * HOUR_MS)


def test_a_format_1_file_is_read_and_a_damaged_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"fresh": {"window": T0 // HOUR_MS, "epsilon": 0.5}}))
    ledger = PrivacyLedger.open(path)
    assert ledger.spent(FRESH, T0) == 0.5
    path.write_text(json.dumps({"format": 2, "collections": {"usage": {"window": 1}}}))
    with pytest.raises(ValueError, match="not a privacy ledger"):
        PrivacyLedger.open(path)
