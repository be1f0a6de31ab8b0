"""One attribute's defence in one window: the detectors that apply to its mechanism, in order, each on what the
previous ones kept.

1. Tests of individual reports, when the window's reports are at hand (a closed window read again, or the
   simulator): support itemsets (UE, local hashing), output density (numeric means). Their findings can also be
   given (`prior`, as an audit recorded them) instead of the reports.
2. Tests of the sums on what is left: excess claims (every frequency oracle, both ways), the mean's bound
   (numeric), disagreement then key frequency (PCKV), against the reference window when there is one. Given the
   sequential test's state (`Drift`, the sums of the windows before), a frequency oracle's items (and PCKV's keys,
   whose frequencies are one's: `ldpstream.mechanisms.poisoning.keyvalue.KeyOracle`) and a numeric mean first take
   this window's step of it (`ldpstream.mechanisms.poisoning.sequential`), then the block test's (its latest
   windows together against the lagged windows before them) and the long block test's (ten windows against a
   frozen lagged reference); what they find drifting is held on that side. Their latest windows are summed raw,
   their lagged ones defended (`blocks_of`): a window a test held stays visible to the tests until it leaves the
   latest windows, so an attacker who paces itself under the window's bound is held window after window.
3. Heavy hitters (prefix trees): the decode capped by the reference and, where there are some, by the lagged
   windows of the tests over windows, which a ramp has not reached yet, each tested as the block tests are (this
   window and the recent ones summed against them), so a slow fall is found (`ReferenceCap`, `tree_cap`: a suspected
   prefix ranked by its lowest reference frequency, the others by their estimates capped one standard deviation
   above the lowest), nothing removed from the sums.

The statistics are an attribute's block of the collector's ([n_j, the mechanism's statistics],
`ldpstream.mechanisms.mixed.attribute_block`); `removed` is in the same layout, so the defended block is
`block - removed`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ldpstream.mechanisms.base import Estimate, Mechanism, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.keyvalue.pckv import PCKV
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.open_domain.tree import PrefixTree
from ldpstream.mechanisms.poisoning.base import (
    CLEAN,
    SUSPECTED,
    TOO_FEW,
    UNTESTED,
    Finding,
    Policy,
)
from ldpstream.mechanisms.poisoning.frequency import (
    Supports,
    block_shift,
    excess_claims,
    long_shift,
    standardized_excess,
    support_itemsets,
    supports_itemsets_apply,
    usable_reference,
)
from ldpstream.mechanisms.poisoning.heavy import HEAVY, ReferenceCap, set_aside_estimate
from ldpstream.mechanisms.poisoning.keyvalue import KeyOracle, key_frequency_bound, keyvalue_disagreement
from ldpstream.mechanisms.poisoning.numeric import mean_bound, mean_excess, mean_shift, output_density
from ldpstream.mechanisms.poisoning.sequential import (
    BLOCK,
    BLOCK_WINDOWS,
    CUSUM,
    LAG_WINDOWS,
    LONG,
    LONG_LAG,
    LONG_WINDOWS,
    cusum_step,
    threshold,
)

PER_REPORT = frozenset({"support_itemsets", "output_density"})  # detectors that flag individual reports


@dataclass(frozen=True)
class Drift:
    """The sequential test's two sums of an attribute after a window, per item of a frequency oracle or one for a
    numeric mean (`ldpstream.mechanisms.poisoning.sequential`); each sum's anchor, the reference value when the sum
    last stood at zero (the level before the drift began: the reference itself may by then hold part of it); and
    whether each side is held to its anchor: from when its sum passes the threshold until it is back at zero (an
    attacker who stops for a window or two is not let go)."""

    upper: np.ndarray
    lower: np.ndarray
    anchor_up: np.ndarray
    anchor_down: np.ndarray
    held_up: np.ndarray
    held_down: np.ndarray

    @staticmethod
    def start(mech: Mechanism) -> Drift | None:
        """Zero sums for a mechanism the sequential test applies to (frequency oracles and PCKV's keys: per item;
        numeric means); else None."""
        size = mech.domain_size if isinstance(mech, FrequencyOracle | PCKV) else (
            1 if isinstance(mech, NumericMechanism) else 0)
        if not size:
            return None
        zero, nan, no = np.zeros(size), np.full(size, np.nan), np.zeros(size, dtype=bool)
        return Drift(zero, zero, nan, nan, no, no)

    def step(self, x: np.ndarray, reference: np.ndarray, policy: Policy) -> Drift:
        """The state after a window of standardized excesses `x` over `reference` (the reference values)."""
        upper, lower = cusum_step(self.upper, self.lower, x)
        h = threshold(policy.alpha_sequential / 2, self.upper.size)  # the block test has the other half
        return Drift(upper, lower, np.where(self.upper == 0, reference, self.anchor_up),
                     np.where(self.lower == 0, reference, self.anchor_down),
                     (self.held_up | (upper > h)) & (upper > 0), (self.held_down | (lower > h)) & (lower > 0))

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Per item, the level its upper (lower) side is held to (NaN: not held)."""
        return np.where(self.held_up, self.anchor_up, np.nan), np.where(self.held_down, self.anchor_down, np.nan)

    def as_lists(self) -> list[list[float]]:
        """The six arrays as lists of numbers (an audit record keeps them)."""
        return [np.asarray(a, dtype=np.float64).tolist() for a in (self.upper, self.lower, self.anchor_up,
                                                                   self.anchor_down, self.held_up, self.held_down)]

    @staticmethod
    def from_lists(arrays: Sequence[Sequence[float]]) -> Drift:
        """The state `as_lists` wrote; ValueError if it is not one."""
        if len(arrays) != 6 or len({len(a) for a in arrays}) != 1:
            raise ValueError("a drift state is six arrays of one length")
        up, down, anchor_up, anchor_down, held_up, held_down = (np.asarray(a, dtype=np.float64) for a in arrays)
        return Drift(up, down, anchor_up, anchor_down, held_up != 0, held_down != 0)


@dataclass(frozen=True)
class Defence:
    """The findings of an attribute's detectors, what they remove from its block, the heavy-hitter cap, and the
    sequential test's sums after this window."""

    findings: tuple[Finding, ...]
    removed: np.ndarray
    cap: ReferenceCap | None = None
    strings: tuple[str, ...] = ()  # a tree's suspected strings (its top list's capped ones, then raised: "... (down)")
    drift: Drift | None = None

    @property
    def set_aside(self) -> float:
        """Reports set aside (counted, or estimated by the tests on sums) from the attribute's block."""
        return float(sum(f.set_aside for f in self.findings))

    @property
    def status(self) -> str:
        """suspected if any detector is; else clean if any tested; else too few reports; else untested."""
        statuses = {f.status for f in self.findings}
        for status in (SUSPECTED, CLEAN, TOO_FEW):
            if status in statuses:
                return status
        return UNTESTED

    def suspects(self) -> tuple[int, ...]:
        """Item codes (keys, bins) any detector suspects, sorted."""
        return tuple(sorted({s for f in self.findings for s in f.suspects}))


def _usable(block: np.ndarray | None, policy: Policy) -> bool:
    return block is not None and float(block[0]) >= policy.min_reports


def _block(finding: Finding, size: int) -> np.ndarray:
    """A finding's removed statistics as a block [n_j, mechanism statistics] (a mean's finding removes from the
    leading (count, sum, sum of squares) only)."""
    out = np.zeros(size)
    if finding.removed is not None:
        out[0] = finding.set_aside
        out[1:1 + np.size(finding.removed)] = finding.removed
    return out


def defend(mech: Mechanism, block: np.ndarray, reference: np.ndarray | None = None, reports: Reports | None = None,
           prior: Sequence[Finding] = (), policy: Policy = Policy(), drift: Drift | None = None,
           blocks: tuple[np.ndarray, ...] | None = None) -> Defence:
    """The attribute's defence (module docstring). `reference`: the reference window's block (None: none);
    `reports`: the window's reports of this attribute (per-report tests); `prior`: per-report findings recorded
    before (used instead of running them); `drift`: the sequential test's sums after the window before (None: the
    sequential test is not run); `blocks`: the block test's (the sum of the raw blocks of the windows just
    before this one, the sum of the defended lagged windows before those: `blocks_of`; None: not run; run with a
    drift only), then the long block test's likewise, where there are four; a tree's cap takes their lagged windows
    as further references, tested with this window and their recent windows summed (`tree_cap`)."""
    block = np.asarray(block, dtype=np.float64)
    size = block.shape[0]
    removed = np.zeros(size)
    findings: list[Finding] = []
    for finding in prior:
        findings.append(finding)
        removed += _block(finding, size)
    ref = np.asarray(reference, dtype=np.float64) if _usable(reference, policy) else None

    def step(finding: Finding) -> None:
        nonlocal removed
        findings.append(finding)
        removed = removed + _block(finding, size)

    def ref_estimate() -> Estimate | None:
        return mech.estimate(ref[1:]) if ref is not None else None

    def sequential(x: np.ndarray, reference_values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """This window's step of the sequential test: the levels held (None: the test is not run)."""
        nonlocal drift
        if drift is None:
            return None
        drift = drift.step(x, reference_values, policy)
        up, down = drift.levels()
        which = np.flatnonzero(np.isfinite(up) | np.isfinite(down))
        findings.append(Finding(CUSUM, SUSPECTED if len(which) else CLEAN, int(block[0]),
                                suspects=tuple(int(v) for v in which), false_positive=policy.alpha_sequential,
                                detail=f"{len(which)} drifting over windows (up: {int(np.isfinite(up).sum())}, down: "
                                       f"{int(np.isfinite(down).sum())}), held where they were before"
                                if len(which) else ""))
        return up, down

    enough = float(block[0]) >= policy.min_reports

    def over_windows(tested: Supports | NumericMechanism, left: np.ndarray, x: np.ndarray,
                     reference_values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The sequential, block and long block tests' step on an oracle's items (or a numeric mean) whose
        standardized excesses over the reference are `x`: the levels held (None: not run)."""
        held = sequential(x, reference_values)
        if held is not None and blocks is not None:
            held = block_test(tested, left, (blocks[0], blocks[1]), policy, held, findings, int(block[0]))
            if len(blocks) == 4:
                held = long_block_test(tested, left, (blocks[2], blocks[3]), policy, held, findings, int(block[0]))
        return held

    def over_items(oracle: Supports, left: np.ndarray, reference_est: Estimate | None
                   ) -> tuple[np.ndarray, np.ndarray] | None:
        """`over_windows` on an oracle's items, where its reference is usable (None: not run)."""
        if not enough or reference_est is None or not usable_reference(reference_est, policy):
            return None
        return over_windows(oracle, left, standardized_excess(oracle, oracle.estimate(left), reference_est, policy),
                            np.asarray(reference_est.value))

    if isinstance(mech, FrequencyOracle):
        if reports is not None and not prior and supports_itemsets_apply(mech):
            step(support_itemsets(mech, reports, ref_estimate(), policy))
        left = (block - removed)[1:]
        reference_est = ref_estimate()
        step(excess_claims(mech, left, reference_est, policy, over_items(mech, left, reference_est)))
    elif isinstance(mech, NumericMechanism):
        if reports is not None and not prior:
            step(output_density(mech, np.asarray(reports["value"]), policy))
        left, reference_est = (block - removed)[1:], ref_estimate()
        reference_stats = None if ref is None else ref[1:]
        levels = None
        if enough and reference_est is not None:
            x = np.array([mean_excess(mech, left, reference_est, reference_stats, policy)])
            levels = over_windows(mech, left, x, np.atleast_1d(np.asarray(reference_est.value, dtype=np.float64)))
        step(mean_bound(mech, left, reference_est, reference_stats, policy,
                        (math.nan, math.nan) if levels is None else (float(levels[0][0]), float(levels[1][0]))))
    elif isinstance(mech, KeyValueMechanism):
        keys_held = None
        if isinstance(mech, PCKV) and ref is not None:
            keys = KeyOracle(mech)
            levels = over_items(keys, (block - removed)[1:], keys.estimate(ref[1:]))
            keys_held = None if levels is None else levels[0]  # from above only (`key_frequency_bound`)
        step(key_frequency_bound(mech, (block - removed)[1:], ref_estimate(), policy, keys_held))
        step(keyvalue_disagreement(mech, (block - removed)[1:], policy))
    elif isinstance(mech, PrefixTree):
        return _tree_defence(mech, block, tree_cap(mech, ref, blocks, policy, block), policy)
    else:
        findings.append(Finding("none", UNTESTED, int(block[0]), detail=f"no poisoning detector for {mech.name}"))
    return Defence(tuple(findings), removed, drift=drift)


def block_test(mech: Supports | NumericMechanism, left: np.ndarray, blocks: tuple[np.ndarray, np.ndarray],
               policy: Policy, held: tuple[np.ndarray, np.ndarray], findings: list[Finding], reports: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The block test's step (`ldpstream.mechanisms.poisoning.sequential`) on an oracle's items (`block_shift`) or a
    numeric mean (`mean_shift`, its half of alpha_sequential on the one statistic): `_shifted`'s."""
    recent, lagged = blocks
    if float(lagged[0]) < policy.min_reports:
        return held
    lagged_est = mech.estimate(lagged[1:])
    alpha = policy.alpha_sequential / 2
    shift = (mean_shift(mech, left + recent[1:], lagged[1:], alpha) if isinstance(mech, NumericMechanism) else
             block_shift(mech, mech.estimate(left + recent[1:]), lagged_est, policy))
    return _shifted(BLOCK, f"over the last {BLOCK_WINDOWS} windows against the {LAG_WINDOWS} before", alpha, shift,
                    lagged_est, held, findings, reports)


def long_block_test(mech: Supports | NumericMechanism, left: np.ndarray, blocks: tuple[np.ndarray, np.ndarray],
                    policy: Policy, held: tuple[np.ndarray, np.ndarray], findings: list[Finding], reports: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The long block test's step (`ldpstream.mechanisms.poisoning.sequential`) on an oracle's items (`long_shift`:
    every item both ways, the top item down) or a numeric mean (`mean_shift`: a mean has no top item, so all of
    alpha_long on the one two-sided test): `_shifted`'s."""
    recent, lagged = blocks
    if float(lagged[0]) < policy.min_reports:
        return held
    lagged_est = mech.estimate(lagged[1:])
    shift = (mean_shift(mech, left + recent[1:], lagged[1:], policy.alpha_long) if isinstance(mech, NumericMechanism)
             else long_shift(mech, mech.estimate(left + recent[1:]), lagged_est,
                             mech.estimate(left + recent[1:] + lagged[1:]), policy))
    return _shifted(LONG, f"over the last {LONG_WINDOWS} windows against the {LONG_LAG} before", policy.alpha_long,
                    shift, lagged_est, held, findings, reports)


def _shifted(detector: str, windows: str, false_positive: float, shift: np.ndarray, lagged: Estimate,
             held: tuple[np.ndarray, np.ndarray], findings: list[Finding], reports: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """A block test's finding (`shift`: per item, or the mean, +1 / -1 where found above / below the lagged
    windows, 0 elsewhere) appended to `findings`, and the levels `held` with each item it finds held, on that side,
    to the `lagged` windows' estimate as well (the nearer of the two levels where another test holds it). The
    block tests are not run while their lagged windows hold fewer than the policy's minimum of reports."""
    which = np.flatnonzero(shift)
    findings.append(Finding(detector, SUSPECTED if len(which) else CLEAN, reports,
                            suspects=tuple(int(v) for v in which), false_positive=false_positive,
                            detail=f"{len(which)} shifted {windows} (up: {int((shift > 0).sum())}, down: "
                                   f"{int((shift < 0).sum())}), held where they were" if len(which) else ""))
    return _held_at(held, shift, np.atleast_1d(np.asarray(lagged.value, dtype=np.float64)))


def _held_at(held: tuple[np.ndarray, np.ndarray], shift: np.ndarray, level: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """`held` with each shifted item also held, on its side, at `level` (the nearer of the two where both hold)."""
    up, down = held
    return (np.fmin(up, np.where(shift > 0, level, np.nan)), np.fmax(down, np.where(shift < 0, level, np.nan)))


def _split(blocks: Sequence[np.ndarray | None], defences: Sequence[Defence | None], index: int, recent: int,
           lag: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The sum of the raw blocks of the `recent` windows before `index`, and of the defended blocks of the `lag`
    before those (None: the lagged windows have no reports)."""
    lagged = reference_of(blocks, defences, index - recent, lag) if index - recent > 0 else None
    if lagged is None:
        return None
    latest = reference_of(blocks, defences, index, recent, raw=True)
    return (np.zeros_like(lagged) if latest is None else latest), lagged


def blocks_of(blocks: Sequence[np.ndarray | None], defences: Sequence[Defence | None], index: int,
              ) -> tuple[np.ndarray, ...] | None:
    """The block test's inputs for window `index` (`defend`'s `blocks`): the sum of the RAW blocks of the
    BLOCK_WINDOWS - 1 windows before it, and of the defended blocks of the LAG_WINDOWS before those; then, where its
    lagged windows have reports, the long block test's likewise: the LONG_WINDOWS - 1 windows before it raw, the
    LONG_LAG before those defended (None: the block test's lagged windows have no reports).

    The recent windows enter raw so that a window a test held stays visible to the tests until it leaves the recent
    block: were they defended, a held window would enter the next windows' block with its attack removed, and an
    attacker pacing itself under the per-window bound would look, block after block, like a level that does not
    move. The lagged windows stay defended (they are the level the findings are held to). Where nothing was found
    raw = defended, so on honest data the tests are as before except right after a false alarm: the window that
    raised it stays in the block as it was, so the alarm can repeat until that window leaves the block (up to
    BLOCK_WINDOWS - 1 more windows, LONG_WINDOWS - 1 for the long block test): about as many alarms as before, each
    possibly a run of alarm windows. A genuine surge was already held window after window by the window's own test
    (its references are defended, so they never take it in); the block tests now find it too while its windows are
    in their latest block, where before they saw its held windows at the level it is held to."""
    short = _split(blocks, defences, index, BLOCK_WINDOWS - 1, LAG_WINDOWS)
    if short is None:
        return None
    long = _split(blocks, defences, index, LONG_WINDOWS - 1, LONG_LAG)
    return short if long is None else short + long


def defend_windows(mech: Mechanism, blocks: Sequence[np.ndarray | None], recorded: Sequence[Defence | None] = (),
                   policy: Policy = Policy(), reference_windows: int = 4, first: int = 0) -> list[Defence | None]:
    """Consecutive windows of an attribute defended in order, oldest first (None: a window without reports): each
    against the sum of the defended blocks of the `reference_windows` before it, and with the sequential test's
    sums carried from one to the next. A window with a `recorded` defence (an audit's) keeps it, and its sums
    where it has them. Windows before `first` are not defended (their blocks enter the references raw), and the
    sums start at zero there; nor are a heavy-hitter tree's (its defence caps the decode and removes nothing, so its
    windows enter the references raw; its cap reads the lagged windows `blocks_of` sums instead: `tree_cap`). The
    last entry's reference and sums are those the window after the list is defended with (`reference_of`)."""
    out: list[Defence | None] = []
    drift = Drift.start(mech)
    for i, block in enumerate(blocks):
        record = recorded[i] if i < len(recorded) else None
        if block is None:
            out.append(None)
        elif record is not None:
            out.append(record)
            drift = record.drift or drift
        elif i < first or isinstance(mech, PrefixTree):  # a tree's defence removes nothing: not run (its decode costs)
            out.append(Defence((), np.zeros(np.shape(block)), drift=drift))
        else:
            defence = defend(mech, block, reference_of(blocks, out, i, reference_windows), policy=policy,
                             drift=drift, blocks=blocks_of(blocks, out, i))
            drift = defence.drift
            out.append(defence)
    return out


def reference_of(blocks: Sequence[np.ndarray | None], defences: Sequence[Defence | None], index: int,
                 reference_windows: int = 4, raw: bool = False) -> np.ndarray | None:
    """The sum of the defended blocks (block - removed; `raw`: the blocks as they came) of the `reference_windows`
    windows before `index` that have reports (None: none has)."""
    kept = [np.asarray(blocks[i], dtype=np.float64) - (0.0 if raw else d.removed)
            for i in range(max(0, index - reference_windows), index)
            if (d := defences[i]) is not None and blocks[i] is not None]
    return np.sum(kept, axis=0) if kept else None


def tree_cap(tree: PrefixTree, reference: np.ndarray | None, blocks: tuple[np.ndarray, ...] | None,
             policy: Policy, window: np.ndarray) -> ReferenceCap | None:
    """The cap of a tree's decode (`ReferenceCap`) of `window` (its block) against the window's `reference` block
    (budget alpha_window) and the lagged windows of `blocks` (`blocks_of`), each tested with the window and its
    recent ones summed, as the oracles' block tests are: the block test's (budget alpha_sequential) and the long
    block test's (alpha_long), each where it has enough reports at every level; None without a usable reference."""
    if reference is None:
        return None
    cap = ReferenceCap(tree, np.asarray(reference, dtype=np.float64)[1:], policy)
    if not cap.usable():
        return None
    this = np.asarray(window, dtype=np.float64)[1:]
    lagged = () if blocks is None else tuple(
        (np.asarray(lag, dtype=np.float64)[1:], alpha, this + np.asarray(recent, dtype=np.float64)[1:])
        for recent, lag, alpha in zip(blocks[0::2], blocks[1::2], (policy.alpha_sequential, policy.alpha_long),
                                      strict=False))
    return cap.with_lagged(lagged)


def _tree_defence(tree: PrefixTree, block: np.ndarray, cap: ReferenceCap | None, policy: Policy) -> Defence:
    """Heavy hitters: the decode capped (`tree_cap`); the strings of the last level capped or raised (demoted) are the
    suspects, else the deepest prefixes."""
    n = int(block[0])
    removed = np.zeros(block.shape[0])
    if n < policy.min_reports:
        return Defence((Finding(HEAVY, TOO_FEW, n, detail=f"{n} report(s): fewer than {policy.min_reports}"),),
                       removed)
    if cap is None:
        return Defence((Finding(HEAVY, UNTESTED, n, detail="no reference window with enough reports: a fake "
                                                           "string looks like a popular one"),), removed)
    tree.heavy_hitters(block[1:], cap=cap)
    capped_levels = [level for level, rows in sorted(cap.capped.items()) if rows]
    raised_levels = [level for level, rows in sorted(cap.raised.items()) if rows]
    if not capped_levels and not raised_levels:
        return Defence((Finding(HEAVY, CLEAN, n, false_positive=cap.false_positive),), removed, cap)
    references = f"{1 + len(cap.lagged)} reference(s): the windows before{', lagged windows' if cap.lagged else ''}"
    strings: tuple[str, ...] = ()
    details, set_aside = [], 0.0
    if capped_levels:
        rows, prefix = _deepest(tree, cap.capped, capped_levels)
        strings += prefix
        # no statistics are removed (the sketches keep them); the reports set aside: the most, over the capped
        # levels, of the fewest of a level's reports that carry a suspect and explain its rise (each at most that
        # level's carriers: `set_aside_estimate`; a deep level's suspects can be noise prefixes that collide with the
        # fakes' cells, whose honest share hides them)
        set_aside = max(set_aside_estimate(tree, block[1:], level, np.stack([r for r, _, _ in cap.capped[level]]),
                                           np.array([bound for _, _, bound in cap.capped[level]]))[1]
                        for level in capped_levels)
        details.append(f"{len(rows)} {_what(tree, capped_levels)} above the most an honest window shows given the "
                       f"{references}, ranked by their lowest reference frequency (levels capped: "
                       f"{len(capped_levels)})")
    if raised_levels:  # demoted: the reports that push a string down carry none of its prefixes, so none is counted
        rows, prefix = _deepest(tree, cap.raised, raised_levels)
        strings += tuple(f"{s} (down)" for s in prefix)
        details.append(f"{len(rows)} {_what(tree, raised_levels)} below the least an honest window shows given the "
                       f"{references}, ranked by their highest reference frequency (levels: {len(raised_levels)})")
    return Defence((Finding(HEAVY, SUSPECTED, n, set_aside, None, (), cap.false_positive, 0.0, "; ".join(details)),),
                   removed, cap, strings)


def _deepest(tree: PrefixTree, found: dict[int, list[tuple[np.ndarray, float, float]]], levels: list[int]
             ) -> tuple[list[tuple[np.ndarray, float, float]], tuple[str, ...]]:
    """The suspects of the deepest of `levels` and their strings (prefixes of a level before the last end in ...)."""
    rows = found[levels[-1]]
    strings = tuple(tree.domain.decode(np.stack([row for row, _, _ in rows])))
    return rows, strings if levels[-1] == tree.levels - 1 else tuple(f"{s}..." for s in strings)


def _what(tree: PrefixTree, levels: list[int]) -> str:
    return "string(s) of the top list" if levels[-1] == tree.levels - 1 else "prefix(es)"
