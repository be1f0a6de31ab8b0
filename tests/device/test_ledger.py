"""The privacy-budget ledger: one spec's epsilon per window, refusal with a reason, roll-over, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.contract.spec import parse_spec
from ldpstream.device.ledger import ALL_TIME_WINDOW, BudgetExceeded, PrivacyLedger, window_of

HOUR_MS = 3_600_000
SPEC = parse_spec("""
name: diag
version: 1
epsilon: 2.0
windows: [1d, 1h]
attributes: [{name: battery_level, type: numeric, range: [0, 100]}]
""")
T0 = 1_700_000_000_000 // HOUR_MS * HOUR_MS  # the start of an hour


def test_the_smallest_window_counts() -> None:
    assert window_of(SPEC, T0) == T0 // HOUR_MS
    assert window_of(SPEC, T0 + HOUR_MS - 1) == window_of(SPEC, T0)
    assert window_of(SPEC, T0 + HOUR_MS) == window_of(SPEC, T0) + 1


def test_a_second_report_in_a_window_is_refused_and_the_next_window_is_fresh() -> None:
    ledger = PrivacyLedger()
    assert ledger.charge(SPEC, T0 + 5) == 0.0
    with pytest.raises(BudgetExceeded, match=r"to 4 > the collection's budget eps = 2 \(already spent 2\)"):
        ledger.charge(SPEC, T0 + HOUR_MS - 1)
    assert ledger.spent(SPEC, T0) == 2.0
    ledger.charge(SPEC, T0 + HOUR_MS)  # roll-over: a new window, a new budget
    assert ledger.spent(SPEC, T0 + HOUR_MS) == 2.0


def test_partial_charges_add_up_to_the_budget() -> None:
    ledger = PrivacyLedger()
    assert ledger.charge(SPEC, T0, 0.5) == pytest.approx(1.5)
    ledger.check(SPEC, T0, 1.5)
    with pytest.raises(BudgetExceeded):
        ledger.check(SPEC, T0, 1.6)
    ledger.charge(SPEC, T0, 1.5)
    with pytest.raises(BudgetExceeded):
        ledger.check(SPEC, T0, 1e-3)


def test_a_refused_report_charges_nothing() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0, 1.5)
    with pytest.raises(BudgetExceeded):
        ledger.charge(SPEC, T0, 1.0)
    assert ledger.spent(SPEC, T0) == 1.5


def test_a_report_for_a_past_window_is_refused() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0 + HOUR_MS)
    with pytest.raises(BudgetExceeded, match="before the ledger's current window"):
        ledger.check(SPEC, T0)


def test_budgets_are_per_collection_name_not_version() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0)
    with pytest.raises(BudgetExceeded):
        ledger.check(SPEC.model_copy(update={"version": 2}), T0)
    ledger.check(SPEC.model_copy(update={"name": "other"}), T0)


def test_without_windows_the_budget_is_for_all_time() -> None:
    spec = SPEC.model_copy(update={"windows": []})
    ledger = PrivacyLedger()
    assert window_of(spec, T0) == ALL_TIME_WINDOW
    ledger.charge(spec, 0)
    with pytest.raises(BudgetExceeded, match="all time"):
        ledger.check(spec, T0 + 1000 * HOUR_MS)


def test_bad_epsilon_is_refused() -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        PrivacyLedger().check(SPEC, T0, float("nan"))


def test_persistence_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    PrivacyLedger.open(path).charge(SPEC, T0)
    reopened = PrivacyLedger.open(path)
    with pytest.raises(BudgetExceeded):
        reopened.check(SPEC, T0)
    reopened.charge(SPEC, T0 + HOUR_MS)
    assert PrivacyLedger.open(path).spent(SPEC, T0 + HOUR_MS) == 2.0
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a privacy ledger"):
        PrivacyLedger.open(path)
