"""A device's privacy-budget ledger: the epsilon it has spent per collection in the current window.

Each report of a collection is eps-LDP (000 Lemma 4 for the sampled collector) and costs the spec's epsilon; by
sequential composition (the composition theorem 000 Sec. IV-A uses, its ref. [17]) the reports of one device in
one window together are LDP with the sum of their budgets. The ledger refuses, with `BudgetExceeded`, a report that
would take the spend of a window above the spec's epsilon. The window is the spec's smallest tumbling window,
numbered by report time (floor(t / length)); a spec without windows has one all-time window.

The budget holds whether or not the spec has `one_report_per_window` (that flag is the aggregator's duplicate
check; the budget is the device's own guarantee). Over a longer window of the spec (1d beside 1h) a device's
reports compose: up to 24 reports, 24 * eps, per day.

Budgets are kept per collection *name*, not per version: publishing a new version must not reset what a device
has already spent in the current window. A report for a window earlier than the newest one the ledger has seen is
refused too, since the spend of a past window is no longer kept.

The ledger is pure and in memory; `PrivacyLedger.open(path)` keeps one device's own state in a small JSON file,
written (atomically) on every charge.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from collection.spec import CollectionSpec, window_seconds

ALL_TIME_WINDOW = -1  # the window number of a spec without tumbling windows
EPSILON_SLACK = 1e-9  # relative tolerance on sums of floating-point budgets


class BudgetExceeded(ValueError):
    """A report would exceed the collection's privacy budget in its window."""


@dataclass(frozen=True)
class Spend:
    """What one collection has spent in one window."""

    window: int
    epsilon: float


def window_of(spec: CollectionSpec, timestamp_ms: int) -> int:
    """The number of the spec's smallest tumbling window that holds `timestamp_ms` (ALL_TIME_WINDOW if none)."""
    if not spec.windows:
        return ALL_TIME_WINDOW
    return int(timestamp_ms) // (window_seconds(spec.windows[0]) * 1000)


class PrivacyLedger:
    """Per-collection epsilon spent by one device in its current window; refuses what would exceed the budget."""

    def __init__(self, spends: dict[str, Spend] | None = None, path: str | Path | None = None) -> None:
        self._spends: dict[str, Spend] = dict(spends or {})
        self.path = None if path is None else Path(path)

    def spent(self, spec: CollectionSpec, timestamp_ms: int) -> float:
        """Epsilon already spent on `spec`'s collection in the window of `timestamp_ms`."""
        current = self._spends.get(spec.name)
        window = window_of(spec, timestamp_ms)
        return current.epsilon if current is not None and current.window == window else 0.0

    def check(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None) -> None:
        """Raise BudgetExceeded if a report costing `epsilon` (default: the spec's) would exceed the budget."""
        self._next_spend(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon)

    def charge(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None) -> float:
        """Record a report costing `epsilon` (default: the spec's); return the budget left in its window."""
        spend = self._next_spend(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon)
        self._spends[spec.name] = spend
        if self.path is not None:
            self.save(self.path)
        return max(spec.epsilon - spend.epsilon, 0.0)

    def _next_spend(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float) -> Spend:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"a report's epsilon must be finite and > 0, got {epsilon!r}")
        window = window_of(spec, timestamp_ms)
        current = self._spends.get(spec.name)
        if current is not None and window < current.window:
            raise BudgetExceeded(f"{spec.name}: report time {timestamp_ms} ms falls in window {window}, before the "
                                 f"ledger's current window {current.window}; a past window's budget is not kept")
        before = current.epsilon if current is not None and current.window == window else 0.0
        total = before + epsilon
        if total > spec.epsilon * (1 + EPSILON_SLACK):
            where = "all time" if window == ALL_TIME_WINDOW else f"window {window} ({spec.windows[0]})"
            raise BudgetExceeded(f"{spec.name}: a report costing eps = {epsilon:g} would bring the spend in {where} "
                                 f"to {total:g} > the collection's budget eps = {spec.epsilon:g} "
                                 f"(already spent {before:g})")
        return Spend(window, total)

    def to_json(self) -> str:
        spends = {name: {"window": s.window, "epsilon": s.epsilon} for name, s in sorted(self._spends.items())}
        return json.dumps(spends)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        try:
            data = json.loads(text)
            return cls({name: Spend(int(s["window"]), float(s["epsilon"])) for name, s in data.items()})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a privacy ledger: {exc!r}") from exc

    def save(self, path: str | Path) -> None:
        """Write the ledger atomically (write a temporary file, then rename it over the old one)."""
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, p)

    @classmethod
    def open(cls, path: str | Path) -> PrivacyLedger:
        """The ledger saved at `path` (empty if there is no file yet), saved there again on every charge."""
        p = Path(path)
        spends = cls.from_json(p.read_text())._spends if p.exists() else {}
        return cls(spends, p)
