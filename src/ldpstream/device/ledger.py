"""A device's privacy-budget ledger: per collection, the epsilon spent in the current window, the odometer of
everything spent over the device's lifetime, the memos already paid for, and the collection's device secret.

The window. Each report of a collection is eps-LDP (000 Lemma 4 for the sampled collector) and costs the spec's
epsilon; by sequential composition (the composition theorem 000 Sec. IV-A uses, its ref. [17]) the reports of one
device in one window together are LDP with the sum of their budgets. The ledger refuses, with `BudgetExceeded`, a
report that would take the spend of a window above the spec's epsilon. The window is the spec's smallest tumbling
window, numbered by report time (floor(t / length)); a spec without windows has one all-time window. The budget
holds whether or not the spec has `one_report_per_window` (that flag is the aggregator's duplicate check; the
budget is the device's own guarantee). Over a longer window of the spec (1d beside 1h) a device's reports compose:
up to 24 reports, 24 * eps, per day. A report for a window earlier than the newest one the ledger has seen is
refused too, since the spend of a past window is no longer kept.

The lifetime (the odometer). Without a privacy block every report adds its epsilon to the odometer: T reports cost T
eps, without bound. With `privacy: {per_report, lifetime, values}` (`ldpstream.contract.spec.Privacy`) every report is a
post-processing of memoized responses (`ldpstream.mechanisms.longitudinal`) plus fresh noise, so what it spends over the
lifetime is its memos: a `Memo` (collection, attribute, mechanism, value or rounded value) is charged its eps_inf once,
the first time a report reads it, and never again. A device whose value changes reads a new memo: j distinct values of
an attribute cost j eps_inf. The odometer refuses, with `BudgetExceeded`, a report whose new memos would take it above
the spec's lifetime budget; the device then cannot report the new value in that collection at all (the guarantee it made
is spent), while reports of values it has paid for go on.

The secret. A collection with a lifetime budget perturbs with the device's 64-bit secret for that collection (`secret`,
drawn once with the `secrets` module): the memos are a keyed hash of it (`ldpstream.mechanisms.longitudinal.memo`), so
the secret IS the memo table. It must survive an app restart, or every memo would be drawn afresh and the lifetime
guarantee void; so it is persisted with the rest.

Budgets are kept per collection *name*, not per version: publishing a new version must not reset what a device
has spent; a memo's key names the mechanism and its budgets, so a version that changes them pays for new memos.

The ledger is pure and in memory; `PrivacyLedger.open(path)` keeps one device's own state in a small JSON file,
written atomically (and fsynced) whenever it changes. The file holds the secrets and the memo keys (the device's
values, or their rounding): it is as private as the values themselves and never leaves the device.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpstream.contract.spec import CollectionSpec, window_seconds

ALL_TIME_WINDOW = -1  # the window number of a spec without tumbling windows
EPSILON_SLACK = 1e-9  # relative tolerance on sums of floating-point budgets
FORMAT = 2  # of the JSON file; format 1 (no "format" key) held only the window spends


class BudgetExceeded(ValueError):
    """A report would exceed the collection's privacy budget in its window, or over the device's lifetime."""


@dataclass(frozen=True)
class Memo:
    """A memoized response a report reads: its key (attribute, mechanism and budgets, value or rounded value) and
    the eps_inf its first read costs."""

    key: str
    epsilon: float


@dataclass
class Account:
    """One collection's state on a device."""

    window: int | None = None  # the newest window charged
    window_spent: float = 0.0
    lifetime_spent: float = 0.0
    memos: dict[str, float] = field(default_factory=dict)  # key -> eps_inf charged
    secret: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window, "window_spent": self.window_spent, "lifetime_spent": self.lifetime_spent,
                "memos": dict(sorted(self.memos.items())),
                "secret": None if self.secret is None else f"{self.secret:016x}"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Account:
        secret = d["secret"]
        return cls(None if d["window"] is None else int(d["window"]), float(d["window_spent"]),
                   float(d["lifetime_spent"]), {str(k): float(v) for k, v in d["memos"].items()},
                   None if secret is None else int(secret, 16))


def window_of(spec: CollectionSpec, timestamp_ms: int) -> int:
    """The number of the spec's smallest tumbling window that holds `timestamp_ms` (ALL_TIME_WINDOW if none)."""
    if not spec.windows:
        return ALL_TIME_WINDOW
    return int(timestamp_ms) // (window_seconds(spec.windows[0]) * 1000)


class PrivacyLedger:
    """Per collection: the epsilon one device spent in its current window and over its lifetime, the memos it paid
    for, and its secret; refuses what would exceed either budget (module docstring)."""

    def __init__(self, accounts: dict[str, Account] | None = None, path: str | Path | None = None) -> None:
        self._accounts: dict[str, Account] = dict(accounts or {})
        self.path = None if path is None else Path(path)

    def spent(self, spec: CollectionSpec, timestamp_ms: int) -> float:
        """Epsilon already spent on `spec`'s collection in the window of `timestamp_ms`."""
        account = self._accounts.get(spec.name)
        window = window_of(spec, timestamp_ms)
        return account.window_spent if account is not None and account.window == window else 0.0

    def lifetime_spent(self, collection: str) -> float:
        """The odometer: epsilon spent on the collection over the device's lifetime."""
        account = self._accounts.get(collection)
        return 0.0 if account is None else account.lifetime_spent

    def memos(self, collection: str) -> dict[str, float]:
        """The memos paid for in the collection: key -> eps_inf."""
        account = self._accounts.get(collection)
        return {} if account is None else dict(account.memos)

    def secret(self, collection: str) -> int:
        """The device's 64-bit secret for the collection, drawn (and saved) on first use."""
        account = self._accounts.setdefault(collection, Account())
        if account.secret is None:
            account.secret = secrets.randbits(64)
            self._persist()
        return account.secret

    def check(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None,
              memos: Sequence[Memo] = ()) -> None:
        """Raise BudgetExceeded if a report costing `epsilon` (default: the spec's) and reading `memos` would exceed
        the window's or the lifetime budget."""
        self._next(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon, memos)

    def charge(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None,
               memos: Sequence[Memo] = ()) -> float:
        """Record a report costing `epsilon` (default: the spec's) that reads `memos` (a spec with a privacy block:
        the memos of its attributes, `ldpstream.device.perturb.report_memos`); return the budget left in its window."""
        account = self._next(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon, memos)
        self._accounts[spec.name] = account
        self._persist()
        return max(spec.epsilon - account.window_spent, 0.0)

    def _next(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float, memos: Sequence[Memo]) -> Account:
        """The collection's account after the report, or BudgetExceeded (the ledger itself is not changed)."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"a report's epsilon must be finite and > 0, got {epsilon!r}")
        current = self._accounts.get(spec.name, Account())
        window = window_of(spec, timestamp_ms)
        if current.window is not None and window < current.window:
            raise BudgetExceeded(f"{spec.name}: report time {timestamp_ms} ms falls in window {window}, before the "
                                 f"ledger's current window {current.window}; a past window's budget is not kept")
        before = current.window_spent if current.window == window else 0.0
        total = before + epsilon
        if total > spec.epsilon * (1 + EPSILON_SLACK):
            where = "all time" if window == ALL_TIME_WINDOW else f"window {window} ({spec.windows[0]})"
            raise BudgetExceeded(f"{spec.name}: a report costing eps = {epsilon:g} would bring the spend in {where} "
                                 f"to {total:g} > the collection's budget eps = {spec.epsilon:g} "
                                 f"(already spent {before:g})")
        new = {m.key: m.epsilon for m in memos if m.key not in current.memos}
        lifetime = current.lifetime_spent + (epsilon if spec.privacy is None else math.fsum(new.values()))
        self._check_lifetime(spec, memos, new, current, lifetime)
        return Account(window, total, lifetime, {**current.memos, **new}, current.secret)

    @staticmethod
    def _check_lifetime(spec: CollectionSpec, memos: Sequence[Memo], new: dict[str, float], current: Account,
                        lifetime: float) -> None:
        if spec.privacy is None:
            if memos:
                raise ValueError(f"{spec.name}: a spec without a privacy block has no memos to charge")
            return
        if not memos:
            raise ValueError(f"{spec.name}: a report of a collection with a lifetime budget names the memos it reads")
        if not all(math.isfinite(m.epsilon) and m.epsilon > 0 for m in memos):
            raise ValueError(f"{spec.name}: a memo's epsilon must be finite and > 0")
        if lifetime > spec.privacy.lifetime * (1 + EPSILON_SLACK):
            raise BudgetExceeded(f"{spec.name}: {len(new)} new memo(s) ({', '.join(sorted(new))}) would bring the "
                                 f"lifetime spend to {lifetime:g} > the collection's lifetime budget "
                                 f"{spec.privacy.lifetime:g} (already spent {current.lifetime_spent:g} on "
                                 f"{len(current.memos)} memo(s))")

    def _persist(self) -> None:
        if self.path is not None:
            self.save(self.path)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "collections": {name: a.to_dict()
                                                             for name, a in sorted(self._accounts.items())}})

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        """A ledger from its JSON (format 2, or format 1's window spends); ValueError if it is not one."""
        try:
            data = json.loads(text)
            if data.get("format") == FORMAT:
                return cls({name: Account.from_dict(a) for name, a in data["collections"].items()})
            return cls({name: Account(int(s["window"]), float(s["epsilon"]), float(s["epsilon"]))
                        for name, s in data.items()})
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a privacy ledger: {exc!r}") from exc

    def save(self, path: str | Path) -> None:
        """Write the ledger atomically and durably (write and fsync a temporary file, then rename it over the old
        one)."""
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        with open(tmp, "w") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, p)

    @classmethod
    def open(cls, path: str | Path) -> PrivacyLedger:
        """The ledger saved at `path` (empty if there is no file yet), saved there again on every change."""
        p = Path(path)
        accounts = cls.from_json(p.read_text())._accounts if p.exists() else {}
        return cls(accounts, p)
