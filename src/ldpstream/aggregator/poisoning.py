"""A window's suspected poisoning, on read: which reports are set aside, the defended statistics, the figures the
surfaces show (`ldp estimate`, the read API and the metrics through `ldpstream.aggregator.estimates`).

Two sources, the better one used (`window_defence`):
- **audit**: a closed window whose reports were read again from Kafka (`ldpstream.aggregator.audit`) has a record in
  the store: per attribute, what its tests of individual reports and of the sums set aside (exact statistics of the
  reports set aside, those reports kept in the set-aside topic). The defended estimate is the window's statistics
  minus that.
- **live**: any other window (the open one, or a closed one not audited yet) gets the tests the sums carry
  (`ldpstream.mechanisms.poisoning.attribute.defend` without reports), computed on read.
The reference of a window is the sum of up to REFERENCE_WINDOWS earlier windows of the same length and spec version
that have reports, each *defended*: as its audit recorded it, or, where it has no audit, as its own live defence
leaves it, against its own defended reference (`chain`: windows are defended in order, oldest first, from
CHAIN_WINDOWS before the window read; older windows without an audit enter raw). So an attack the tests found in a
window never becomes the next windows' reference. The sequential test's sums (`Drift`) are carried along the same
chain, and an audit record keeps them, so they resume there. The all-time window has no reference: it is defended
by the audits of its windows of the spec's first length (their removals summed) and the tests that need none.

**A new level accepted.** With drift = 0 a genuine lasting shift of an attribute is held like an attack: the
defended windows that follow are its references and the block tests' lagged windows. An operator who has checked it
accepts it (`ldp poisoning accept`, `accept`): from a window start on, that attribute's history restarts for that
window length. Its earlier windows leave its references and the tests over windows, and the audit records of the
windows since, made before the acceptance, no longer count for it: they are defended live on the new history until
the auditor audits them again (`ldpstream.aggregator.audit.closed_windows` lists them), whose record counts. The
first window accepted has no reference; each one after has those accepted before it. The other attributes keep
their history.

Devices: the defended window counts N (1 - max over attributes of the share of its reports set aside) devices (a fake
device reports k attributes; each attribute's estimate weighs its reports by n_j / N, which this keeps).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.store import ALL_TIME, StatsStore, WindowKey, WindowStats
from ldpstream.contract.spec import window_seconds
from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.open_domain.tree import LevelCap, PrefixTree
from ldpstream.mechanisms.poisoning.attribute import Defence, Drift, blocks_of, defend, defend_windows
from ldpstream.mechanisms.poisoning.base import STATUSES, SUSPECTED, Finding, Policy
from ldpstream.mechanisms.poisoning.sequential import LONG_LAG, LONG_WINDOWS

REFERENCE_WINDOWS = 4
# windows before the one read that are defended live, in order, to defend its reference: with the reference's, as
# many as the long block test reads (its block's other windows and its lagged windows)
CHAIN_WINDOWS = LONG_WINDOWS - 1 + LONG_LAG - REFERENCE_WINDOWS
RECORD_VERSION = 1
DEFAULT_POLICY = Policy()


@dataclass
class WindowDefence:
    """A window's defence: per attribute index its `Defence`, the defended statistics, the caps of string
    attributes' decodes, where the figures come from, the reference used and the attributes' accepted levels."""

    source: str  # "audit" | "live"
    attributes: dict[int, Defence]
    defended: WindowStats
    reference_windows: int = 0
    reference_reports: int = 0
    audited_ms: int | None = None
    caps: dict[str, LevelCap] = field(default_factory=dict)
    accepted: dict[int, Acceptance] = field(default_factory=dict)

    @property
    def set_aside(self) -> float:
        """The largest number of reports set aside from one attribute (see the module docstring on devices)."""
        return max((d.set_aside for d in self.attributes.values()), default=0.0)


# --- records -------------------------------------------------------------------------------------------------------
def finding_json(f: Finding) -> dict[str, Any]:
    """A finding as the audit record keeps it (no per-row flags: the set-aside topic keeps those reports)."""
    return {"detector": f.detector, "status": f.status, "reports": f.reports, "set_aside": f.set_aside,
            "removed": None if f.removed is None else [float(x) for x in f.removed],
            "suspects": list(f.suspects), "false_positive": f.false_positive,
            "bound": f.bound if math.isfinite(f.bound) else None, "detail": f.detail}


def finding_from(raw: Mapping[str, Any]) -> Finding:
    """A finding from its record; ValueError if it is not one."""
    status = raw["status"]
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    removed = raw.get("removed")
    bound = raw.get("bound")
    return Finding(str(raw["detector"]), status, int(raw["reports"]), float(raw["set_aside"]),
                   None if removed is None else np.asarray(removed, dtype=np.float64),
                   tuple(int(s) for s in raw.get("suspects", ())), float(raw.get("false_positive", 0.0)),
                   math.inf if bound is None else float(bound), str(raw.get("detail", "")))


def encode_record(key: WindowKey, attributes: Mapping[int, Defence], audited_ms: int, reports: int,
                  set_aside_messages: int, reference_windows: int) -> bytes:
    """The audit record of a window (module docstring); `drift`: per attribute, the sequential test's sums after it."""
    return json.dumps({
        "record": RECORD_VERSION, "version": key[0], "window": key[1], "start_ms": key[2], "audited_ms": audited_ms,
        "reports": reports, "set_aside_messages": set_aside_messages, "reference_windows": reference_windows,
        "attributes": {str(j): [finding_json(f) for f in d.findings] for j, d in attributes.items()},
        "drift": {str(j): d.drift.as_lists() for j, d in attributes.items() if d.drift is not None},
    }).encode()


@dataclass(frozen=True)
class Record:
    """A decoded audit record."""

    audited_ms: int
    reports: int
    reference_windows: int
    findings: dict[int, tuple[Finding, ...]]
    drift: dict[int, Drift] = field(default_factory=dict)


def decode_record(data: bytes) -> Record | None:
    """The record, or None if it is not one this version reads (an unreadable record is ignored, not fatal)."""
    try:
        raw = json.loads(data)
        if raw.get("record") != RECORD_VERSION:
            return None
        findings = {int(j): tuple(finding_from(f) for f in fs) for j, fs in raw["attributes"].items()}
        drift = {int(j): Drift.from_lists(arrays) for j, arrays in raw.get("drift", {}).items()}
        return Record(int(raw["audited_ms"]), int(raw["reports"]), int(raw.get("reference_windows", 0)), findings,
                      drift)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class Acceptance:
    """An attribute's new level accepted (module docstring): its history restarts at the window starting at
    `from_ms`; audit records made before `accepted_ms` of the windows since no longer count for it."""

    from_ms: int
    accepted_ms: int

    def drops(self, start_ms: int, record: Record | None) -> bool:
        """Whether the window starting at `start_ms` loses `record` for this attribute."""
        return record is not None and start_ms >= self.from_ms and record.audited_ms < self.accepted_ms


def acceptance_member(version: int, window: str, attribute: int) -> str:
    return f"v{version}:{window}:a{attribute}"


def accept(store: StatsStore, plan: Plan, window: str, attribute: int, from_ms: int, accepted_ms: int) -> Acceptance:
    """Accept attribute `attribute`'s level from the `window` window starting at `from_ms` (module docstring)."""
    if window not in plan.spec.windows:
        raise ValueError(f"window length {window!r} is not one of {plan.spec.windows}")
    if not 0 <= attribute < len(plan.mechanisms):
        raise ValueError(f"attribute {attribute} is not one of the spec's {len(plan.mechanisms)}")
    if from_ms % (window_seconds(window) * 1000):
        raise ValueError(f"{from_ms} is not the start of a {window} window")
    store.put_acceptance(plan.spec.name, acceptance_member(plan.spec.version, window, attribute),
                         json.dumps({"from_ms": int(from_ms), "accepted_ms": int(accepted_ms)}).encode())
    return Acceptance(int(from_ms), int(accepted_ms))


def acceptances(store: StatsStore, plan: Plan, window: str) -> dict[int, Acceptance]:
    """The accepted levels of the plan's attributes for one window length, by attribute (an unreadable entry is
    ignored, as an unreadable audit record is)."""
    out: dict[int, Acceptance] = {}
    raw = store.acceptances(plan.spec.name)
    for j in range(len(plan.mechanisms)):
        data = raw.get(acceptance_member(plan.spec.version, window, j))
        try:
            entry = json.loads(data) if data is not None else None
        except ValueError:  # not JSON, or not UTF-8
            continue
        if isinstance(entry, dict) and all(type(entry.get(k)) is int for k in ("from_ms", "accepted_ms")):
            out[j] = Acceptance(entry["from_ms"], entry["accepted_ms"])
    return out


def removed_blocks(plan: Plan, findings: Mapping[int, tuple[Finding, ...]]) -> dict[int, np.ndarray]:
    """Per attribute index, the block [n_j, statistics] its recorded findings remove."""
    out = {}
    for j, size in plan.sizes.items():
        block = np.zeros(size)
        for f in findings.get(j, ()):
            if f.removed is not None and f.removed.shape == (size - 1,):
                block[0] += f.set_aside
                block[1:] += f.removed
        out[j] = block
    return out


# --- windows -------------------------------------------------------------------------------------------------------
def _minus(stats: WindowStats, removed: Mapping[int, np.ndarray]) -> WindowStats:
    """Statistics minus removed blocks; devices scaled by the largest share of an attribute's reports removed.

    Nothing is clipped: a statistic may be negative (a numeric attribute's sum when its mean is below the middle of
    its range, a key-value sum, a Hadamard or sketch sum), and a removal is the statistics of reports counted in the
    window (or, for a test on sums, their estimate), so the difference is what the window holds without them."""
    share = max((float(r[0]) / float(stats.stats[j][0]) for j, r in removed.items()
                 if j in stats.stats and stats.stats[j][0] > 0), default=0.0)
    blocks = {j: v - removed[j] if j in removed else v for j, v in stats.stats.items()}
    return WindowStats(float(math.floor(stats.devices * (1.0 - min(share, 1.0)))), blocks)


def audit_records(store: StatsStore, plan: Plan) -> dict[WindowKey, Record]:
    """The readable audit records of the plan's spec version, by window."""
    out = {}
    for key, data in store.poisoning(plan.spec.name).items():
        record = decode_record(data)
        if record is not None and key[0] == plan.spec.version:
            out[key] = record
    return out


@dataclass(frozen=True)
class Chain:
    """What a window is defended against: its reference (the sum of its defended earlier windows), how many windows
    that sums, per attribute the sequential test's sums after the window before (None where it does not apply), and
    per attribute the block tests' sums of windows (`blocks_of`: the latest raw, the lagged defended; None where
    there are none), and the attributes' accepted levels. An attribute with no window in the reference (its level
    accepted since) has none in `reference.stats`."""

    reference: WindowStats | None
    windows: int
    drift: dict[int, Drift | None]
    blocks: dict[int, tuple[np.ndarray, ...] | None] = field(default_factory=dict)
    accepted: dict[int, Acceptance] = field(default_factory=dict)


def chain(store: StatsStore, plan: Plan, window: str, start_ms: int, records: Mapping[WindowKey, Record],
          policy: Policy = DEFAULT_POLICY) -> Chain:
    """The chain of defended windows before a window (module docstring); none for the all-time window."""
    if window == ALL_TIME:
        return Chain(None, 0, {j: Drift.start(m) for j, m in enumerate(plan.mechanisms)})
    length = window_seconds(window) * 1000
    slots = [start_ms - i * length for i in range(CHAIN_WINDOWS + REFERENCE_WINDOWS, 0, -1)]  # oldest first
    have = {s for v, w, s in store.windows(plan.spec.name) if v == plan.spec.version and w == window}
    starts = [s for s in slots if s in have]
    stats = dict(zip(starts, store.read_windows(plan.spec.name, plan.spec.version, window, starts, plan.sizes),
                     strict=True))
    found = [records.get((plan.spec.version, window, s)) for s in slots]
    accepted = acceptances(store, plan, window)
    defences: dict[int, list[Defence | None]] = {}
    blocks: dict[int, tuple[np.ndarray, ...] | None] = {}
    present: dict[int, list[bool]] = {}
    for j, mech in enumerate(plan.mechanisms):
        since = accepted.get(j)
        kept = present[j] = [s in stats and (since is None or s >= since.from_ms) for s in slots]
        windows = [stats[s].stats[j] if k else None for s, k in zip(slots, kept, strict=True)]
        recorded = [None if r is None or not k or (since is not None and since.drops(s, r)) else
                    Defence(r.findings.get(j, ()), removed_blocks(plan, r.findings)[j], drift=r.drift.get(j))
                    for s, r, k in zip(slots, found, kept, strict=True)]
        defences[j] = defend_windows(mech, windows, recorded, policy, REFERENCE_WINDOWS, REFERENCE_WINDOWS)
        blocks[j] = blocks_of(windows, defences[j], len(slots))
    drift = {j: _last_drift(mech, defences[j]) for j, mech in enumerate(plan.mechanisms)}
    before = [i for i in range(len(slots) - REFERENCE_WINDOWS, len(slots)) if any(p[i] for p in present.values())]
    if not before:
        return Chain(None, 0, drift, blocks, accepted)
    devices, sums = 0.0, {}
    for j in plan.sizes:
        mine = [(stats[slots[i]].stats[j], defences[j][i]) for i in before if present[j][i]]
        if mine:
            sums[j] = np.sum([block - (0.0 if d is None else d.removed) for block, d in mine], axis=0)
    for i in before:
        devices += _minus(stats[slots[i]], {j: d.removed for j, ds in defences.items() if (d := ds[i]) is not None}
                          ).devices
    return Chain(WindowStats(devices, sums), len(before), drift, blocks, accepted)


def _last_drift(mech: Mechanism, defences: list[Defence | None]) -> Drift | None:
    """The sequential test's sums after the last window of a chain that has them (zero sums if none has)."""
    for d in reversed(defences):
        if d is not None and d.drift is not None:
            return d.drift
    return Drift.start(mech)


def window_defence(store: StatsStore, plan: Plan, window: str, start_ms: int, stats: WindowStats | None = None,
                   policy: Policy = DEFAULT_POLICY) -> WindowDefence:
    """The defence of one window (module docstring); `stats`: the window's statistics if already read."""
    name = plan.spec.name
    if stats is None:
        stats = store.read_window(name, plan.spec.version, window, start_ms, plan.sizes)
    records = audit_records(store, plan)
    key = (plan.spec.version, window, start_ms)
    before = chain(store, plan, window, start_ms, records, policy)
    reference, count = before.reference, before.windows
    attributes: dict[int, Defence] = {}
    if window == ALL_TIME:  # the audits of the first window length, summed, then the tests that need no reference
        first = plan.spec.windows[0] if plan.spec.windows else None
        audited = {k: r for k, r in records.items() if k[1] == first}
        accepted = acceptances(store, plan, first) if first is not None else {}
        prior: dict[int, list[Finding]] = {}
        for k, audit in audited.items():
            for j, fs in audit.findings.items():
                if not ((since := accepted.get(j)) is not None and since.drops(k[2], audit)):
                    prior.setdefault(j, []).extend(fs)
        for j, mech in enumerate(plan.mechanisms):
            attributes[j] = defend(mech, stats.stats[j], None, prior=_summed(prior.get(j, []), plan.sizes[j]),
                                   policy=policy)
        source = "audit" if audited else "live"
        audited_ms = max((r.audited_ms for r in audited.values()), default=None)
    else:
        record = records.get(key)
        counts = record is not None and not all((since := before.accepted.get(j)) is not None
                                                 and since.drops(start_ms, record) for j in plan.sizes)
        for j, mech in enumerate(plan.mechanisms):
            ref = None if reference is None else reference.stats.get(j)
            since = before.accepted.get(j)
            if record is None or _is_tree(mech) or (since is not None and since.drops(start_ms, record)):
                attributes[j] = defend(mech, stats.stats[j], ref, policy=policy, drift=before.drift[j],
                                       blocks=before.blocks.get(j))
            else:
                found = tuple(record.findings.get(j, ()))
                attributes[j] = Defence(found, removed_blocks(plan, {j: found})[j])
        if record is None or not counts:  # no record, or none that counts for any attribute
            source, audited_ms = "live", None
        else:
            source, audited_ms, count = "audit", record.audited_ms, record.reference_windows or count
    defended = _minus(stats, {j: d.removed for j, d in attributes.items()})
    caps: dict[str, LevelCap] = {plan.spec.attributes[j].name: d.cap for j, d in attributes.items()
                                 if d.cap is not None}
    return WindowDefence(source, attributes, defended, count, int(reference.devices) if reference else 0,
                         audited_ms, caps, accepted if window == ALL_TIME else before.accepted)


def _is_tree(mech: object) -> bool:
    return isinstance(mech, PrefixTree)


def _summed(findings: list[Finding], size: int) -> tuple[Finding, ...]:
    """Several windows' findings of an attribute as one per detector (their removals and set-asides summed)."""
    by: dict[str, list[Finding]] = {}
    for f in findings:
        by.setdefault(f.detector, []).append(f)
    out = []
    for detector, fs in by.items():
        removed = np.zeros(size - 1)
        for f in fs:
            if f.removed is not None and f.removed.shape == removed.shape:
                removed += f.removed
        status = SUSPECTED if any(f.status == SUSPECTED for f in fs) else fs[-1].status
        suspects = tuple(sorted({s for f in fs for s in f.suspects}))
        out.append(Finding(detector, status, sum(f.reports for f in fs), sum(f.set_aside for f in fs),
                           removed if status == SUSPECTED else None, suspects, fs[-1].false_positive, fs[-1].bound,
                           f"{len(fs)} audited window(s)"))
    return tuple(out)
