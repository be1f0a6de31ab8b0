"""A device's privacy-budget ledger: per collection, the epsilon spent in the current window, the odometer of
everything spent over the device's lifetime, the memos already paid for, and the collection's device secret.

The window. Each report of a collection is eps-LDP (000 Lemma 4 for the sampled collector) and costs the spec's
epsilon; by sequential composition (the composition theorem 000 Sec. IV-A uses, its ref. [17]) the reports of one
device in one window together are LDP with the sum of their budgets. The ledger refuses, with `BudgetExceeded`, a
report that would take the spend of a window above the spec's epsilon. The window is the spec's smallest tumbling
window, numbered by report time (floor(t / length)); a spec without windows has one all-time window. The budget
holds whether or not the spec has `one_report_per_window` (that flag is the aggregator's duplicate check; the
budget is the device's own guarantee). Over a longer window of the spec (1d beside 1h) a device's reports compose:
up to 24 reports, 24 * eps, per day.

The clock. A device's clock can jump far forward or back; the ledger must neither lock the device out of later
windows nor forget what it spent. It keeps the spend of the last `WINDOWS_KEPT` windows it charged (the same for the
device-wide days, `DAYS_KEPT`), and when it must drop one it drops the earliest by number and remembers the latest
number it dropped: a report in a window it still keeps is held to that window's spend, a report in a dropped window
(or one before it) is refused, since that spend is gone, and every other window starts from zero. It keeps only
periods near the device's clock: whenever it charges, the spend of windows and days that begin after the clock plus
the edge's clock skew is forgotten (a report is never made for such a time, `ldpstream.device.sdk.check_report_time`;
such spends come from a clock that was ahead and jumped back, and the edge refused those reports as from the future),
so a handful of future days never lock the present out. A jump back to 1970 charges a window that is dropped first.

The policy (`ldpstream.device.policy`, given to `check`/`charge`). On top of the spec's own budgets the ledger holds
every report to the app's caps: the device-wide spend of the UTC day (`max_epsilon_per_day`, over every collection),
and the collection's odometer to the lifetime the device committed to it when it accepted the spec (`commit`: the
spec's lifetime budget, or the policy's `max_lifetime_per_collection` for a spec without one, at which such a
collection stops). The commitments are kept by collection name, device-wide, so the sum over every collection the
device ever accepted stays within `max_lifetime_per_device` (`ldpstream.device.policy.judge`).

The lifetime (the odometer). Without a privacy block every report adds its epsilon to the odometer: T reports cost T
eps, without bound. With `privacy: {per_report, lifetime, values}` (`ldpstream.contract.spec.Privacy`) every report is a
post-processing of memoized responses (`ldpstream.mechanisms.longitudinal`) plus fresh noise, so what it spends over the
lifetime is its memos: a `Memo` (collection, attribute, mechanism, value or rounded value) is charged its eps_inf once,
the first time a report reads it, and never again. A device whose value changes reads a new memo: j distinct values of
an attribute cost j eps_inf. The odometer refuses, with `BudgetExceeded`, a report whose new memos would take it above
the spec's lifetime budget; the device then cannot report the new value in that collection at all (the guarantee it made
is spent), while reports of values it has paid for go on. A memo is named as docs/reference/protocol.md says ("Memo
naming" m1); a ledger written before m1 holds memos under their legacy names (Python's repr of the mechanism): a report
that reads one finds it paid under that name, which stays (read old, write new: memos first paid later get m1 names),
so no upgrade, nor a downgrade, pays for a memo twice.

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
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ldpstream.contract.clock import now_ms as clock_ms
from ldpstream.contract.spec import CollectionSpec, window_seconds
from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS
from ldpstream.device.state import save_file

if TYPE_CHECKING:
    from ldpstream.device.policy import PrivacyPolicy

ALL_TIME_WINDOW = -1  # the window number of a spec without tumbling windows
EPSILON_SLACK = 1e-9  # relative tolerance on sums of floating-point budgets
FORMAT = 3  # of the JSON file; 2 kept one window per collection, 1 (no "format" key) only the window spends
WINDOWS_KEPT = 64  # windows whose spend a collection's account keeps (module docstring, "The clock")
DAYS_KEPT = 8  # UTC days whose device-wide spend the ledger keeps
DAY_MS = 86_400_000


class BudgetExceeded(ValueError):
    """A report would exceed the collection's privacy budget in its window, or over the device's lifetime."""


@dataclass(frozen=True)
class Memo:
    """A memoized response a report reads: its name (attribute, mechanism and budgets, value or rounded value:
    `ldpstream.device.perturb.memo_prefix`), the eps_inf its first read costs, and the name an older SDK gave it (built
    on Python's repr), under which a ledger written before memo naming m1 holds it (then it is paid)."""

    key: str
    epsilon: float
    legacy: str | None = None


@dataclass
class Spends:
    """Epsilon spent per numbered period (window or day), the last `kept` periods charged, and the latest number
    dropped to keep them few (module docstring, "The clock")."""

    kept: int
    spent: dict[int, float] = field(default_factory=dict)
    dropped: int | None = None

    def of(self, period: int) -> float:
        """What was spent in `period` (0 if nothing was, or if that spend was dropped: see `forgotten`)."""
        return self.spent.get(period, 0.0)

    def forgotten(self, period: int) -> bool:
        """True if the spend of `period` may have been dropped (refuse: it is unknown)."""
        return period not in self.spent and self.dropped is not None and period <= self.dropped

    def near(self, present: int, horizon: int) -> Spends:
        """These spends as the clock sees them in period `present`: those of periods after `horizon` (the clock plus
        the skew) forgotten, and nothing from the present on counted as dropped (a drop while the clock was ahead
        cannot lock the present out)."""
        dropped = self.dropped if self.dropped is None else min(self.dropped, present - 1)
        return Spends(self.kept, {k: v for k, v in self.spent.items() if k <= horizon}, dropped)

    def plus(self, period: int, epsilon: float) -> Spends:
        """These spends with `epsilon` more in `period` (the earliest periods dropped beyond `kept`)."""
        spent = {**self.spent, period: self.of(period) + epsilon}
        dropped = self.dropped
        for old in sorted(spent)[:max(0, len(spent) - self.kept)]:
            del spent[old]
            dropped = old if dropped is None else max(dropped, old)
        return Spends(self.kept, spent, dropped)

    def to_dict(self) -> dict[str, Any]:
        return {"spent": {str(k): v for k, v in sorted(self.spent.items())}, "dropped": self.dropped}

    @classmethod
    def from_dict(cls, d: dict[str, Any], kept: int) -> Spends:
        return cls(kept, {int(k): float(v) for k, v in d["spent"].items()},
                   None if d["dropped"] is None else int(d["dropped"]))


@dataclass
class Account:
    """One collection's state on a device."""

    windows: Spends = field(default_factory=lambda: Spends(WINDOWS_KEPT))
    lifetime_spent: float = 0.0
    memos: dict[str, float] = field(default_factory=dict)  # key -> eps_inf charged
    secret: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"windows": self.windows.to_dict(), "lifetime_spent": self.lifetime_spent,
                "memos": dict(sorted(self.memos.items())),
                "secret": None if self.secret is None else f"{self.secret:016x}"}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Account:
        secret = d["secret"]
        if "windows" in d:
            windows = Spends.from_dict(d["windows"], WINDOWS_KEPT)
        else:  # format 2: the newest window only
            windows = Spends(WINDOWS_KEPT, {} if d["window"] is None else {int(d["window"]): float(d["window_spent"])})
        return cls(windows, float(d["lifetime_spent"]), {str(k): float(v) for k, v in d["memos"].items()},
                   None if secret is None else int(secret, 16))


def window_of(spec: CollectionSpec, timestamp_ms: int) -> int:
    """The number of the spec's smallest tumbling window that holds `timestamp_ms` (ALL_TIME_WINDOW if none)."""
    if not spec.windows:
        return ALL_TIME_WINDOW
    return int(timestamp_ms) // (window_seconds(spec.windows[0]) * 1000)


class PrivacyLedger:
    """Per collection: the epsilon one device spent per window and over its lifetime, the memos it paid for, and its
    secret; device-wide: the spend per UTC day and the lifetimes committed to each collection. Refuses what would
    exceed a budget (module docstring)."""

    def __init__(self, accounts: dict[str, Account] | None = None, path: str | Path | None = None,
                 days: Spends | None = None, commitments: dict[str, float] | None = None) -> None:
        self._accounts: dict[str, Account] = dict(accounts or {})
        self._days = days if days is not None else Spends(DAYS_KEPT)
        self._commitments: dict[str, float] = dict(commitments or {})
        self.path = None if path is None else Path(path)

    def spent(self, spec: CollectionSpec, timestamp_ms: int) -> float:
        """Epsilon already spent on `spec`'s collection in the window of `timestamp_ms`."""
        account = self._accounts.get(spec.name)
        return 0.0 if account is None else account.windows.of(window_of(spec, timestamp_ms))

    def spent_on_day(self, timestamp_ms: int) -> float:
        """Epsilon spent device-wide, over every collection, on the UTC day of `timestamp_ms`."""
        return self._days.of(timestamp_ms // DAY_MS)

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

    @property
    def commitments(self) -> dict[str, float]:
        """The lifetime budget committed to each collection the device accepted, by name."""
        return dict(self._commitments)

    def commit(self, collection: str, lifetime: float) -> None:
        """Reserve `lifetime` for the collection (a commitment never shrinks: what was promised may be spent)."""
        if not (math.isfinite(lifetime) and lifetime > 0):
            raise ValueError(f"a commitment must be finite and > 0, got {lifetime!r}")
        if lifetime > self._commitments.get(collection, 0.0):
            self._commitments[collection] = lifetime
            self._persist()

    def check(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None,
              memos: Sequence[Memo] = (), policy: PrivacyPolicy | None = None, now_ms: int | None = None) -> None:
        """Raise BudgetExceeded if a report costing `epsilon` (default: the spec's) and reading `memos` would exceed
        the window's or the lifetime budget, or, given the app's `policy`, its daily or committed lifetime cap.
        `now_ms` is the device's clock (default the system's): what was charged to periods beyond it and the clock
        skew is forgotten (module docstring, "The clock")."""
        self._next(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon, memos, policy, now_ms)

    def charge(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float | None = None,
               memos: Sequence[Memo] = (), policy: PrivacyPolicy | None = None, now_ms: int | None = None) -> float:
        """Record a report costing `epsilon` (default: the spec's) that reads `memos` (a spec with a privacy block:
        the memos of its attributes, `ldpstream.device.perturb.report_memos`); return the budget left in its window.
        Persisted before it returns: a report is charged whether or not it is ever sent."""
        account, days = self._next(spec, timestamp_ms, spec.epsilon if epsilon is None else epsilon, memos, policy,
                                   now_ms)
        before = self._accounts.get(spec.name), self._days
        self._accounts[spec.name], self._days = account, days
        try:
            self._persist()
        except BaseException:  # not kept on disk (a full disk): not charged, and the report is not made
            self._days = before[1]
            if before[0] is None:
                del self._accounts[spec.name]
            else:
                self._accounts[spec.name] = before[0]
            raise
        return max(spec.epsilon - account.windows.of(window_of(spec, timestamp_ms)), 0.0)

    def _next(self, spec: CollectionSpec, timestamp_ms: int, epsilon: float, memos: Sequence[Memo],
              policy: PrivacyPolicy | None, now_ms: int | None) -> tuple[Account, Spends]:
        """The collection's account and the days after the report, or BudgetExceeded (the ledger is not changed)."""
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"a report's epsilon must be finite and > 0, got {epsilon!r}")
        clock = clock_ms() if now_ms is None else now_ms
        kept = self._accounts.get(spec.name, Account())
        current = Account(kept.windows.near(window_of(spec, clock), window_of(spec, clock + MAX_FUTURE_SKEW_MS)),
                          kept.lifetime_spent, kept.memos, kept.secret)
        days = self._days.near(clock // DAY_MS, (clock + MAX_FUTURE_SKEW_MS) // DAY_MS)
        window = window_of(spec, timestamp_ms)
        if current.windows.forgotten(window):
            raise BudgetExceeded(f"{spec.name}: report time {timestamp_ms} ms falls in window {window}, at or before "
                                 f"window {current.windows.dropped}, whose spend the ledger no longer keeps")
        before = current.windows.of(window)
        total = before + epsilon
        if total > spec.epsilon * (1 + EPSILON_SLACK):
            where = "all time" if window == ALL_TIME_WINDOW else f"window {window} ({spec.windows[0]})"
            raise BudgetExceeded(f"{spec.name}: a report costing eps = {epsilon:g} would bring the spend in {where} "
                                 f"to {total:g} > the collection's budget eps = {spec.epsilon:g} "
                                 f"(already spent {before:g})")
        new = {m.key: m.epsilon for m in memos if m.key not in current.memos and m.legacy not in current.memos}
        lifetime = current.lifetime_spent + (epsilon if spec.privacy is None else math.fsum(new.values()))
        self._check_lifetime(spec, memos, new, current, lifetime)
        day = timestamp_ms // DAY_MS
        if policy is not None:
            self._check_policy(spec, policy, epsilon, day, lifetime, days)
        account = Account(current.windows.plus(window, epsilon), lifetime, {**current.memos, **new}, current.secret)
        return account, days.plus(day, epsilon)

    def _check_policy(self, spec: CollectionSpec, policy: PrivacyPolicy, epsilon: float, day: int,
                      lifetime: float, days: Spends) -> None:
        if days.forgotten(day):
            raise BudgetExceeded(f"day {day} is at or before day {days.dropped}, whose device-wide spend the "
                                 f"ledger no longer keeps")
        today = days.of(day) + epsilon
        if today > policy.max_epsilon_per_day * (1 + EPSILON_SLACK):
            raise BudgetExceeded(f"{spec.name}: a report costing eps = {epsilon:g} would bring the device's spend on "
                                 f"day {day} to {today:g} > the policy's max_epsilon_per_day "
                                 f"{policy.max_epsilon_per_day:g}")
        committed = self._commitments.get(spec.name)
        if committed is None:
            raise BudgetExceeded(f"{spec.name}: the device has not accepted this collection (no lifetime committed)")
        if lifetime > committed * (1 + EPSILON_SLACK):
            raise BudgetExceeded(f"{spec.name}: a report would bring the collection's lifetime spend to {lifetime:g} "
                                 f"> the {committed:g} the device committed to it (its policy's cap)")

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
                                                             for name, a in sorted(self._accounts.items())},
                           "days": self._days.to_dict(), "commitments": dict(sorted(self._commitments.items()))})

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        """A ledger from its JSON (format 3, 2, or format 1's window spends); ValueError if it is not one."""
        try:
            data = json.loads(text)
            if data.get("format") in (2, FORMAT):
                accounts = {str(name): Account.from_dict(a) for name, a in data["collections"].items()}
                days = Spends.from_dict(data["days"], DAYS_KEPT) if "days" in data else None
                commitments = {str(k): float(v) for k, v in data.get("commitments", {}).items()}
                ledger = cls(accounts, days=days, commitments=commitments)
            else:
                ledger = cls({str(name): Account(Spends(WINDOWS_KEPT, {int(s["window"]): float(s["epsilon"])}),
                                                 float(s["epsilon"]))
                              for name, s in data.items()})
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise ValueError(f"not a privacy ledger: {exc!r}") from exc
        ledger._validate()
        return ledger

    def _validate(self) -> None:
        """ValueError unless every number is finite and >= 0 (a file that decodes may still be damaged)."""
        numbers = [*self._days.spent.values(), *self._commitments.values()]
        for a in self._accounts.values():
            numbers += [*a.windows.spent.values(), a.lifetime_spent, *a.memos.values()]
        if not all(isinstance(x, float) and math.isfinite(x) and x >= 0 for x in numbers):
            raise ValueError("not a privacy ledger: a spend that is not a finite number >= 0")

    def save(self, path: str | Path) -> None:
        """Write the ledger atomically and durably (`ldpstream.device.state.save_file`: 0600, fsynced, renamed over
        the old one); StateError, the old file untouched, if it cannot be written (a full disk)."""
        save_file(Path(path), self.to_json().encode())

    @classmethod
    def open(cls, path: str | Path) -> PrivacyLedger:
        """The ledger saved at `path` (empty if there is no file yet), saved there again on every change."""
        p = Path(path)
        ledger = cls.from_json(p.read_text()) if p.exists() else cls()
        ledger.path = p
        return ledger
