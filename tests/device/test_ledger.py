"""The privacy-budget ledger: one spec's epsilon per window, refusal with a reason, roll-over, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldpstream.contract.spec import parse_spec
from ldpstream.device.ledger import (
    ALL_TIME_WINDOW,
    DAYS_KEPT,
    WINDOWS_KEPT,
    BudgetExceeded,
    PrivacyLedger,
    window_of,
)
from ldpstream.device.policy import PrivacyPolicy

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


def test_a_past_window_is_held_to_its_own_spend() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0)
    ledger.charge(SPEC, T0 + HOUR_MS)
    with pytest.raises(BudgetExceeded, match="already spent 2"):
        ledger.check(SPEC, T0 + 5)  # the clock went back an hour: that window's spend is kept
    ledger.check(SPEC, T0 - HOUR_MS)  # a window never charged starts from zero


def test_a_clock_that_jumps_far_ahead_and_back_locks_nothing_out_and_resets_nothing() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0, now_ms=T0)
    year = 365 * 24 * HOUR_MS
    ledger.charge(SPEC, T0 + 80 * year, now_ms=T0 + 80 * year)  # the clock jumps to the next century...
    with pytest.raises(BudgetExceeded):
        ledger.check(SPEC, T0, now_ms=T0)  # ...and back: what was spent now is still spent
    for hour in range(1, 3 * WINDOWS_KEPT):  # later windows go on, long after the jump
        ledger.charge(SPEC, T0 + hour * HOUR_MS, now_ms=T0 + hour * HOUR_MS)
    assert ledger.spent(SPEC, T0 + 80 * year) == 0  # the far window is not near the clock: forgotten, not kept
    with pytest.raises(BudgetExceeded, match="no longer keeps"):
        ledger.check(SPEC, T0, now_ms=T0 + 3 * WINDOWS_KEPT * HOUR_MS)  # an early window whose spend was dropped
        # is refused, never reset to zero


def test_future_days_never_lock_the_present_out() -> None:
    policy = PrivacyPolicy(max_epsilon_per_day=5.0)
    ledger = PrivacyLedger()
    ledger.commit(SPEC.name, 1000.0)
    day = 24 * HOUR_MS
    today = T0 // day * day
    for d in range(1, DAYS_KEPT + 2):  # a clock ahead by days stamped reports on every day the ledger keeps...
        ledger.charge(SPEC, today + d * day, policy=policy, now_ms=today + d * day)
    for hour in range(2):  # ...and back: the present reports on, every hour
        ledger.charge(SPEC, today + hour * HOUR_MS, policy=policy, now_ms=today + hour * HOUR_MS)
    assert ledger.spent_on_day(today) == 2 * SPEC.epsilon and ledger.spent_on_day(today + 2 * day) == 0


def test_a_clock_that_jumps_back_to_1970_costs_one_window_and_blocks_nothing_later() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, 0)
    for hour in range(WINDOWS_KEPT + 1):
        ledger.charge(SPEC, T0 + hour * HOUR_MS)
    with pytest.raises(BudgetExceeded, match="no longer keeps"):
        ledger.check(SPEC, 0)  # dropped first: never charged again
    ledger.check(SPEC, T0 + (WINDOWS_KEPT + 1) * HOUR_MS)


def test_budgets_are_per_collection_name_not_version() -> None:
    ledger = PrivacyLedger()
    ledger.charge(SPEC, T0)
    with pytest.raises(BudgetExceeded):
        ledger.check(SPEC.replace(version=2), T0)
    ledger.check(SPEC.replace(name="other"), T0)


def test_without_windows_the_budget_is_for_all_time() -> None:
    spec = SPEC.replace(windows=[])
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
