"""Fake devices over time (issue 42): attacks across consecutive windows, against the defence as the aggregator runs
it (each window defended against the sum of its four earlier windows, defended, the sequential tests' state carried
along, and the block test against the lagged windows: `ldpstream.mechanisms.poisoning.attribute.defend_windows`),
next to the references of before (the raw sums of the four earlier windows, no sequential test: "raw ref").

Per oracle and epsilon, windows of n genuine reports (frequency oracles: Zipf(1.0) over d = 1024 items, each window's
support counts drawn from their exact marginals, as `bench_poisoning.marginal_reference`; PM: a truncated normal,
perturbed; PEM: Zipf(1.0) over 10k words, perturbed; PCKV-GRR: Zipf keys with values, perturbed), HISTORY honest
windows first (the chain a deployment that has run a while holds: the block test's latest and lagged windows), then:
- `single`: one window of maximal-gain fakes on r = 10 targets (PM: the largest output; PEM: 10 absent strings;
  PCKV: 10 of 32 keys, M2GA) at beta = 1%, 5% and 10% of the window's reports; the gain in that window;
- `ramp`: ten windows of the same fakes, their share rising 1%, 2%, ..., 10%; the gain at the last window;
- `under`: ten windows in which an attacker who knows the published (defended) reference and the per-window bound
  crafts just enough maximal-gain reports (from 5% fakes; the rest honest reports, of items drawn from the genuine
  population for a frequency oracle) to raise each target to 2.5 standard deviations under the bound over that
  reference (`bench_poisoning.adaptive_limits`'s rule), each window: its rise over the genuine frequency is that
  allowance plus what its earlier windows left in the reference (the mean of its rises there), so a reference that
  takes in its windows raises it window after window; the gain after ten windows against its first window's (the
  one-window adaptive gain), and the first window the alert fires, after `--under-history` honest windows (HISTORY
  by default; DEMOTION_HISTORY is a deployment that has run a while) (frequency oracles; PCKV: its key
  frequencies' bound, the rest of its fakes honest reports of other keys; PM: the mean's bound, `bench_poisoning`'s
  adaptive reports on [1, the largest output]; PEM: the cap's bound against the four windows before at the last
  level, `tree_allowance`, the rest of its fakes honest reports of genuine strings);
- `paced`: ten windows of the attacker who paces itself best against every test over windows (frequency oracles and
  PM): the levels of `bench_poisoning_pacing.paced_levels`, ADAPTIVE_MARGIN standard deviations under each test,
  after `--under-history` honest windows, crafted as `under`'s; its gain after ten windows against the one-window
  adaptive gain (the window's bound less the same margin), and whether the alert fires;
- `demotion`: ten windows of 5% fakes supporting none of r = 1 target, the most frequent item (PM: the smallest
  output; PCKV: reports that name no target, the most frequent key; PEM: reports that carry none of the most
  frequent string's prefixes), after DEMOTION_HISTORY honest windows
  (frequency oracles and PCKV: the demotion test's block and lagged windows),
  over `--runs` seeds: how often it is found in the first window and within ten, and the gain (negative)
  left at the first and the last window (frequency oracles, PM and PCKV);
- `honest`: `--honest-windows` honest windows: windows with any finding suspected (false alarms, and which
  detector raised them) and the genuine reports set aside (PEM: also, every QUALITY_EVERY-th window, the genuine
  top TOP strings its decoded top list holds with no cap, the cap of before and ours: `top_list_quality`).
Gain: sum over the targets of (estimate with the fakes - estimate of the same genuine reports without them), each
side defended by its own chain (PEM: the targets' estimates as the capped decode ranks them, "raw ref" its cap
against the four windows before only, ours with the lagged windows too; PCKV: frequency plus mean). `removed` =
1 - ours / none. The alert fires in a window when any finding of the attribute is suspected (what `ldp estimate` and
the metrics show as the alert beside the fraction set aside; PEM: a capped or raised prefix).

Prints each JSON row (stderr) and, last on stdout, all of them: oracle, epsilon, scenario, beta, gain_none,
gain_raw_ref, gain_ours, removed_raw_ref, removed_ours, alerts (windows with an alert, of the attacked ones), and per
scenario its extra fields (under: one_window_gain, ratio, first_alert, and for frequency oracles and PM
planned_one_window_gain, the first window's rise the attacker planned summed over its targets, the one-window
adaptive gain without the noise of one window's reports, and ratio_planned, the last window's gain over it; paced:
levels, planned_one_window_gain, ratio_planned, first_alert; demotion: detected_first_window,
detected_within_ten, runs, mean_first_alert and the gains at the first and last window; honest: windows,
false_alarms, by_detector, genuine_set_aside; PEM: quality_windows, genuine_top_none, genuine_top_before,
genuine_top_ours).
Run: .venv/bin/python benchmarks/bench_poisoning_windows.py [--n 1000000] [--oracles grr,oue,olh,pm,pem,pckv-grr]
     [--epsilons 1,4] [--scenarios single,ramp,under,paced,demotion,honest] [--runs 10] [--honest-windows 2000]
     [--seed 7] [--under-history 11]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from bench_poisoning import (
    ADAPTIVE_MARGIN,
    DOMAIN,
    KEYS,
    POLICY,
    REFERENCE_WINDOWS,
    TOP,
    WORDS,
    ZIPF,
    capped,
    keyvalue_population,
    marginal_reference,
)
from bench_poisoning_pacing import paced_levels, window_bound

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate, Mechanism, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.keyvalue.pckv import PCKV
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.open_domain.sketch import HashedGRR
from ldpstream.mechanisms.open_domain.strings import StringDomain
from ldpstream.mechanisms.open_domain.tree import PEM, PrefixTree, suffixes
from ldpstream.mechanisms.poisoning.attribute import Defence, blocks_of, defend, defend_windows, reference_of, tree_cap
from ldpstream.mechanisms.poisoning.base import SUSPECTED, bonferroni_z
from ldpstream.mechanisms.poisoning.frequency import item_bounds, report_threshold, supports_itemsets_apply
from ldpstream.mechanisms.poisoning.keyvalue import KeyOracle
from ldpstream.mechanisms.poisoning.sequential import BLOCK_WINDOWS, LAG_WINDOWS, LONG_LAG, LONG_WINDOWS
from ldpstream.simulator.poisoning import (
    Adaptive,
    fake_frequency_reports,
    fake_keyvalue_reports,
    fake_numeric_reports,
    fake_tree_reports,
)
from ldpstream.simulator.population import random_words, truncated_gaussian, zipf_probabilities

SCENARIOS = ("single", "ramp", "under", "paced", "demotion", "honest")
SINGLE_BETAS = (0.01, 0.05, 0.1)
HISTORY = BLOCK_WINDOWS - 1 + LAG_WINDOWS  # honest windows before an attack: the latest and the lagged windows
DEMOTION_HISTORY = LONG_WINDOWS - 1 + LONG_LAG  # before a demotion: the demotion test's lagged windows too
ATTACKED = 10
TARGETS = 10
UNDER_BETA = 0.05
DEMOTION_BETA = 0.05
QUALITY_EVERY = 10  # an honest tree's top list decoded three more ways every this many windows


def make(name: str, eps: float) -> Mechanism:
    if name == "pem":
        return PEM(eps, StringDomain(8, "abcdefghijklmnopqrstuvwxyz"), seed=11, top=TOP)
    if name.startswith("pckv"):
        return registry.make_keyvalue(name, eps, KEYS)
    return registry.make(name, eps, domain=DOMAIN) if registry.takes_domain(name) else registry.make(name, eps)


class Windows:
    """One mechanism's windows: genuine blocks drawn fresh, fakes' statistics added, the targets' estimate."""

    def __init__(self, mech: Mechanism, n: int, rng: np.random.Generator, targets: np.ndarray) -> None:
        self.mech, self.n, self.rng = mech, n, rng
        self.probs = zipf_probabilities(DOMAIN, ZIPF)
        self.targets: Any = targets
        if isinstance(mech, PrefixTree):
            words = [w.decode() for w in random_words(WORDS + TARGETS, rng, max_length=8)]
            self.words = words[:WORDS]  # Zipf ranks: the first is the most frequent
            self.rows = mech.domain.encode(self.words)
            self.word_probs = zipf_probabilities(WORDS, ZIPF)
            self.targets = words[WORDS:]  # strings no genuine device holds
        elif isinstance(mech, KeyValueMechanism):
            self.means = rng.uniform(-0.5, 0.5, KEYS)
            self.targets = np.sort(rng.choice(KEYS, size=TARGETS, replace=False))

    def genuine(self) -> np.ndarray:
        mech, n, rng = self.mech, self.n, self.rng
        if isinstance(mech, FrequencyOracle):
            return attribute_block(n, marginal_reference(mech, rng.multinomial(n, self.probs), rng))
        if isinstance(mech, NumericMechanism):
            return attribute_block(n, mech.accumulate(mech.perturb(truncated_gaussian(0.0, 0.25, n, rng), rng)))
        if isinstance(mech, PrefixTree):
            return attribute_block(n, mech.accumulate(mech.perturb(
                self.rows[rng.choice(WORDS, size=n, p=self.word_probs)], rng)))
        assert isinstance(mech, KeyValueMechanism)
        return attribute_block(n, mech.accumulate(mech.perturb(keyvalue_population(n, rng, self.means), rng)))

    def with_fakes(self, block: np.ndarray, fakes: Reports) -> np.ndarray:
        m = len(next(iter(fakes.values())))
        return block + attribute_block(m, self.mech.accumulate(fakes))

    def fakes(self, attack: str, m: int, adaptive: Adaptive = Adaptive(), targets: Any = None) -> Reports:
        mech, rng = self.mech, self.rng
        targets = self.targets if targets is None else targets
        if isinstance(mech, FrequencyOracle):
            return fake_frequency_reports(mech, attack, targets, m, rng, adaptive)
        if isinstance(mech, NumericMechanism):
            return fake_numeric_reports(mech, attack, m, rng)
        if isinstance(mech, PrefixTree):
            carriers = None if adaptive.rise is None else tree_crafted(mech, adaptive, len(targets))
            return fake_tree_reports(mech, attack, targets, m, rng, carriers, decoys=self.words[:50])
        assert isinstance(mech, KeyValueMechanism)
        return fake_keyvalue_reports(mech, targets, m, rng, attack, adaptive)

    def value(self, blocks: Sequence[np.ndarray], defences: Sequence[Defence | None] | None, at: int,
              targets: Any = None, lagged: bool = True) -> float:
        """The targets' summed estimate in window `at` (a numeric mean; PCKV: frequency plus mean; PEM: as the
        decode capped by the window's reference ranks them, and by the lagged windows' unless `lagged` is False: the
        cap of before) of its block less what its defence removed (None: no defence)."""
        mech = self.mech
        targets = self.targets if targets is None else targets
        d = None if defences is None else defences[at]
        kept = blocks[at] if d is None else blocks[at] - d.removed
        if isinstance(mech, PEM):
            est = np.asarray(mech.frequencies(kept[1:], targets).value)
            reference = None if defences is None else reference_of(blocks, defences, at, REFERENCE_WINDOWS)
            assert defences is not None or reference is None
            cap = None if reference is None else tree_cap(
                mech, reference, blocks_of(blocks, defences, at) if lagged else None, POLICY, kept)
            return float(est.sum()) if cap is None else float(capped(mech, cap, kept[1:], targets).sum())
        value = mech.estimate(kept[1:]).value
        if isinstance(mech, KeyValueMechanism):
            f, mean = np.asarray(value)
            return float(f[targets].sum() + mean[targets].sum())
        if isinstance(mech, FrequencyOracle):
            return float(np.asarray(value)[targets].sum())
        return float(np.atleast_1d(np.asarray(value))[0])


def raw_chain(mech: Mechanism, blocks: Sequence[np.ndarray]) -> list[Defence | None]:
    """The references of before: the raw sum of the four earlier windows, no sequential test (a tree's defence
    removes nothing: its reference is the raw sum either way)."""
    if isinstance(mech, PrefixTree):
        return ours(mech, blocks)
    return [defend(mech, b, np.sum(blocks[max(0, i - REFERENCE_WINDOWS):i], axis=0) if i else None, policy=POLICY)
            for i, b in enumerate(blocks)]


def ours(mech: Mechanism, blocks: Sequence[np.ndarray]) -> list[Defence | None]:
    return defend_windows(mech, blocks, policy=POLICY, reference_windows=REFERENCE_WINDOWS)


def alert(w: Windows, blocks: Sequence[np.ndarray], defences: Sequence[Defence | None], at: int) -> bool:
    """Whether window `at` raises the alert: any finding suspected (a tree: a prefix capped by its reference)."""
    if isinstance(w.mech, PrefixTree):
        reference = reference_of(blocks, defences, at, REFERENCE_WINDOWS)
        if reference is None:
            return False
        return defend(w.mech, blocks[at], reference, policy=POLICY,
                      blocks=blocks_of(blocks, defences, at)).status == SUSPECTED
    d = defences[at]
    return d is not None and any(f.status == SUSPECTED for f in d.findings)


def gains(w: Windows, attacked: list[np.ndarray], honest: list[np.ndarray], at: int,
          targets: Any = None) -> dict[str, float]:
    """Gain at window `at` with no defence, with the raw references and with ours (module docstring)."""
    out = {"gain_none": w.value(attacked, None, at, targets) - w.value(honest, None, at, targets)}
    for name, run in (("raw_ref", raw_chain), ("ours", ours)):
        lagged = name == "ours"  # a tree's cap of before: the four windows before only
        out[f"gain_{name}"] = (w.value(attacked, run(w.mech, attacked), at, targets, lagged)
                               - w.value(honest, run(w.mech, honest), at, targets, lagged))
    return out


def removed(none: float, left: float) -> float | None:
    return None if abs(none) < 1e-12 else 1.0 - left / none


def fakes_for(beta: float, n: int) -> int:
    """Fake reports that make a share beta of a window of n genuine ones."""
    return int(round(beta * n / (1 - beta)))


def single(w: Windows) -> list[dict[str, Any]]:
    """One attacked window after the honest history, at each beta of SINGLE_BETAS."""
    rows = []
    for beta in SINGLE_BETAS:
        honest = [w.genuine() for _ in range(HISTORY + 1)]
        attacked = honest[:-1] + [w.with_fakes(honest[-1], w.fakes("maximal_gain", fakes_for(beta, w.n)))]
        row = gains(w, attacked, honest, HISTORY)
        row["alerts"] = int(alert(w, attacked, ours(w.mech, attacked), HISTORY))
        rows.append({"beta": beta, **row})
    return rows


def ramp(w: Windows) -> dict[str, Any]:
    honest = [w.genuine() for _ in range(HISTORY + ATTACKED)]
    attacked = list(honest[:HISTORY])
    for t in range(ATTACKED):
        attacked.append(w.with_fakes(honest[HISTORY + t], w.fakes("maximal_gain", fakes_for(0.01 * (t + 1), w.n))))
    row = gains(w, attacked, honest, len(attacked) - 1)
    defences = ours(w.mech, attacked)
    row["alerts"] = sum(alert(w, attacked, defences, i) for i in range(HISTORY, len(attacked)))
    return {"beta": 0.1, **row}


def under(w: Windows, history: int = HISTORY) -> dict[str, Any]:
    """The attacker under the bound, window by window against the chain as published so far, after `history`
    honest windows."""
    mech, targets = w.mech, w.targets
    oracle = KeyOracle(mech) if isinstance(mech, PCKV) else mech  # PCKV: its key frequencies' bound
    m = fakes_for(UNDER_BETA, w.n)
    per_report = targets_per_report(w)
    honest = [w.genuine() for _ in range(history + ATTACKED)]
    attacked = list(honest[:history])
    rises: list[float] = []
    defences: list[Defence | None] = []
    for t in range(ATTACKED):
        defences = ours(mech, attacked)
        reference = reference_of(attacked, defences, len(attacked), REFERENCE_WINDOWS)
        assert reference is not None
        ref_est = None if isinstance(mech, PrefixTree) else oracle.estimate(reference[1:])
        if isinstance(mech, PrefixTree):
            allowed = tree_allowance(mech, reference, w.n + m)
        elif isinstance(oracle, NumericMechanism):  # the mean's bound: z sd of an honest window's difference
            variance = float(ref_est.stderr) ** 2 * ref_est.n  # a report's
            allowed = max(0.0, (bonferroni_z(POLICY.alpha_window, 2) - ADAPTIVE_MARGIN)
                          * float(np.sqrt(variance / (w.n + m) + variance / ref_est.n)))
        else:
            assert isinstance(oracle, FrequencyOracle | KeyOracle)
            window = Estimate(n=w.n + m, value=ref_est.value, stderr=ref_est.stderr * np.sqrt(REFERENCE_WINDOWS))
            bound, base = item_bounds(oracle, window, ref_est, POLICY)
            sd = np.sqrt(window.stderr ** 2 + ref_est.stderr ** 2)
            allowed = float(max(0.0, np.min(((bound - base) - ADAPTIVE_MARGIN * sd)[targets])))
        kept = [rises[i] for i in range(max(0, t - REFERENCE_WINDOWS), t)  # its rises the reference holds
                if not alert(w, attacked, defences, history + i)]
        rise = allowed + (float(np.mean(kept)) * len(kept) / REFERENCE_WINDOWS if kept else 0.0)
        rises.append(rise)
        attacked.append(w.with_fakes(honest[history + t], crafted(w, m, rise, ref_est, per_report)))
    defences = ours(mech, attacked)
    flags = [alert(w, attacked, defences, history + t) for t in range(ATTACKED)]
    first_alert = flags.index(True) + 1 if any(flags) else None
    one = gains(w, attacked, honest, history)
    row: dict[str, Any] = dict(gains(w, attacked, honest, len(attacked) - 1))
    row.update(one_window_gain=one["gain_ours"], first_alert=first_alert,
               ratio=row["gain_ours"] / one["gain_ours"] if one["gain_ours"] > 1e-12 else None, alerts=sum(flags))
    if isinstance(mech, NumericMechanism | FrequencyOracle) and rises[0] > 0:  # the first window's rise as planned
        planned = rises[0] * (1 if isinstance(mech, NumericMechanism) else len(targets))
        row.update(planned_one_window_gain=planned, ratio_planned=row["gain_ours"] / planned)
    return {"beta": UNDER_BETA, **row}


def targets_per_report(w: Windows) -> int | None:
    """The most targets one crafted report of a frequency oracle supports and stays under the itemset test
    (None: no such test, or not a frequency oracle)."""
    if not (isinstance(w.mech, FrequencyOracle) and supports_itemsets_apply(w.mech)):
        return None
    threshold = report_threshold(w.mech, w.targets, POLICY.alpha_report)
    return None if threshold is None else threshold[0] - 1


def crafted(w: Windows, m: int, rise: float, reference: Estimate | None, per_report: int | None) -> Reports:
    """m fake reports that raise each target by `rise` over its genuine value, the rest of them honest (a frequency
    oracle, PCKV, a tree: the adaptive reports of `ldpstream.simulator.poisoning`, a frequency oracle's other fakes
    reporting items drawn from the genuine population, so that they move no other item; a numeric mean:
    `bench_poisoning`'s adaptive reports on [1, the largest output] that move the mean by `rise` from the
    reference's, the rest honest values perturbed)."""
    mech = w.mech
    if isinstance(mech, NumericMechanism):
        assert reference is not None
        top = mech.output_range[1]
        carriers = min(m, int(rise * (w.n + m) / ((1 + top) / 2 - float(reference.value))))
        return {"value": np.concatenate([fake_numeric_reports(mech, "adaptive", carriers, w.rng)["value"],
                                         mech.perturb(truncated_gaussian(0.0, 0.25, m - carriers, w.rng),
                                                      w.rng)["value"]])}
    mimic = w.probs if isinstance(mech, FrequencyOracle) else None  # the other fakes report like the population
    return w.fakes("adaptive", m, Adaptive(per_report, rise, w.n + m, mimic))


def paced(w: Windows, history: int = HISTORY) -> dict[str, Any]:
    """The attacker who paces itself best against every test over windows: the levels of `bench_poisoning_pacing`'s
    linear program (the most it can hold at the tenth window, ADAPTIVE_MARGIN standard deviations under each test,
    after `history` honest windows), in one window's standard deviation of a target's estimate as the window's test
    takes it, from the honest windows' defended reference; its gain after ten windows against the one-window
    adaptive gain (the first window's bound less the same margin)."""
    mech, targets = w.mech, w.targets
    assert isinstance(mech, FrequencyOracle | NumericMechanism)
    m = fakes_for(UNDER_BETA, w.n)
    honest = [w.genuine() for _ in range(history + ATTACKED)]
    attacked = list(honest[:history])
    reference = reference_of(attacked, ours(mech, attacked), history, REFERENCE_WINDOWS)
    assert reference is not None
    ref_est = mech.estimate(reference[1:])
    items = 1 if isinstance(mech, NumericMechanism) else mech.domain_size
    if isinstance(mech, NumericMechanism):  # the test's variance of a report, device sampling counted
        count, total, squares = (float(x) for x in reference[1:4])
        sd = float(np.sqrt(max(float(ref_est.stderr) ** 2 * ref_est.n, squares / count - (total / count) ** 2)
                           / (w.n + m)))
    else:
        window = Estimate(n=w.n + m, value=ref_est.value, stderr=ref_est.stderr * np.sqrt(REFERENCE_WINDOWS))
        bound, base = item_bounds(mech, window, ref_est, POLICY)
        spread = np.sqrt(1 + (w.n + m) / ref_est.n)
        sd = float(np.min(((bound - base) / bonferroni_z(POLICY.alpha_window, 2 * items) / spread)[targets]))
    levels = paced_levels(ATTACKED, items, POLICY, history=history, margin=ADAPTIVE_MARGIN)
    per_report = targets_per_report(w)
    for t in range(ATTACKED):
        attacked.append(w.with_fakes(honest[history + t], crafted(w, m, float(levels[t]) * sd, ref_est, per_report)))
    defences = ours(mech, attacked)
    flags = [alert(w, attacked, defences, history + t) for t in range(ATTACKED)]
    planned = window_bound(items, POLICY, ADAPTIVE_MARGIN) * sd * (1 if items == 1 else len(targets))
    row: dict[str, Any] = dict(gains(w, attacked, honest, len(attacked) - 1))
    row.update(levels=[round(float(x), 2) for x in levels], planned_one_window_gain=planned,
               ratio_planned=row["gain_ours"] / planned, first_alert=flags.index(True) + 1 if any(flags) else None,
               alerts=sum(flags))
    return {"beta": UNDER_BETA, **row}


def tree_allowance(tree: PrefixTree, reference: np.ndarray, n: int) -> float:
    """The most a string no device holds may rise over the window's reference at every level and stay
    ADAPTIVE_MARGIN standard deviations under the cap's bound against it (`ReferenceCap`: the four windows before,
    Bonferroni over the levels, both sides and the level's candidates; n / levels reports a level). Its crafted
    reports raise its prefix at every level by as much, and the first level scores the fewest candidates (the root's
    extensions, not the beam's): its z is the smallest, and the one the attacker stays under."""
    last = tree.oracles[-1]
    n_ref = last.z_table(tree.level_stats(reference[1:], tree.levels - 1))[1]
    var = float(last.variance(0.0))
    z = bonferroni_z(POLICY.alpha_window / tree.levels, 2 * len(suffixes(tree.domain, tree.step)))
    return max(0.0, (z - ADAPTIVE_MARGIN) * float(np.sqrt(var * tree.levels / n + var / n_ref)))


def tree_crafted(tree: PrefixTree, adaptive: Adaptive, targets: int) -> int:
    """Crafted reports that raise each of `targets` strings by `adaptive.rise` at every level: one names a target's
    bucket at a level drawn uniformly and adds its estimator's term there, g / (g - 1) ((1 - q) / (p - q) - 1 / g)
    / n_T (`SketchOracle.user_terms`; n_T = population / levels). (Counted as (1 - q) / (p - q) / n_T before, the
    attacker raised each target 1.21 times its plan at eps = 1, where g = 4, and its first window was flagged.)"""
    last = tree.oracles[-1]
    assert isinstance(last, HashedGRR) and adaptive.rise is not None
    g = last.width
    term = g / (g - 1) * ((1 - last.q) / (last.p - last.q) - 1 / g)
    return int(adaptive.rise * targets * adaptive.population / term)


def demotion(w: Windows, runs: int) -> dict[str, Any]:
    """Ten windows of 5% fakes demoting the top item, `runs` times: found in the first window, found within ten,
    and the gain (negative) left at the first and the last window."""
    frequency = isinstance(w.mech, FrequencyOracle | KeyValueMechanism)  # items (keys) with the long block test
    target: Any = np.array([int(np.argmax(w.probs))]) if isinstance(w.mech, FrequencyOracle) else np.array([0])
    if isinstance(w.mech, PrefixTree):
        target = w.words[:1]  # the most frequent genuine string
    m = fakes_for(DEMOTION_BETA, w.n)
    first, within, when = 0, 0, []
    out: dict[str, list[float]] = {}
    history = DEMOTION_HISTORY if frequency else HISTORY
    for _ in range(runs):
        honest = [w.genuine() for _ in range(history + ATTACKED)]
        attacked = honest[:history] + [w.with_fakes(b, w.fakes("demotion", m, targets=target))
                                       for b in honest[history:]]
        defences = ours(w.mech, attacked)
        found = [alert(w, attacked, defences, i) if isinstance(w.mech, PrefixTree) else
                 d is not None and any(f.status == SUSPECTED and (not frequency or int(target[0]) in f.suspects)
                                       for f in d.findings) for i, d in enumerate(defences) if i >= history]
        first += found[0]
        within += any(found)
        if any(found):
            when.append(found.index(True) + 1)
        for at, label in ((history, "first"), (len(attacked) - 1, "last")):
            for key, gain in gains(w, attacked, honest, at, target).items():
                out.setdefault(f"{key}_{label}", []).append(gain)
    row: dict[str, Any] = {k: float(np.mean(v)) for k, v in out.items()}
    return {"beta": DEMOTION_BETA, "gain_none": row["gain_none_first"], "gain_raw_ref": row["gain_raw_ref_first"],
            "gain_ours": row["gain_ours_first"], **row, "detected_first_window": first,
            "detected_within_ten": within, "runs": runs, "mean_first_alert": float(np.mean(when)) if when else None}


def honest_windows(w: Windows, windows: int) -> dict[str, Any]:
    """`windows` honest windows after the history, in one chain: the windows with an alert, the detectors that
    raised them, and the genuine reports set aside."""
    blocks = [w.genuine() for _ in range(windows + HISTORY)]
    defences = ours(w.mech, blocks)
    flagged = [i for i in range(HISTORY, len(blocks)) if alert(w, blocks, defences, i)]
    by = Counter(f.detector for i in flagged if (d := defences[i]) is not None for f in d.findings
                 if f.status == SUSPECTED)
    if isinstance(w.mech, PrefixTree):  # its findings are the alert's decode's, not kept in the chain
        by = Counter(f.detector for i in flagged for f in defend(
            w.mech, blocks[i], reference_of(blocks, defences, i, REFERENCE_WINDOWS), policy=POLICY,
            blocks=blocks_of(blocks, defences, i)).findings if f.status == SUSPECTED)
    set_aside = sum(d.set_aside for d in defences[HISTORY:] if d is not None)
    row = {"beta": 0.0, "windows": windows, "false_alarms": len(flagged), "by_detector": dict(by),
           "genuine_set_aside": set_aside / (windows * w.n)}
    if isinstance(w.mech, PrefixTree):
        row.update(top_list_quality(w, blocks, defences))
    return row


def top_list_quality(w: Windows, blocks: Sequence[np.ndarray], defences: Sequence[Defence | None]
                     ) -> dict[str, Any]:
    """A tree's honest decode: of the genuine top TOP strings, how many the decoded top list holds on average, with
    no cap, the cap of before (the four windows before) and ours (and the lagged windows), every QUALITY_EVERY-th
    window."""
    tree = w.mech
    assert isinstance(tree, PrefixTree)
    truth = set(w.words[:TOP])
    found: dict[str, list[int]] = {"none": [], "before": [], "ours": []}
    for i in range(HISTORY, len(blocks), QUALITY_EVERY):
        reference = reference_of(blocks, defences, i, REFERENCE_WINDOWS)
        for name, cap in (("none", None), ("before", tree_cap(tree, reference, None, POLICY, blocks[i])),
                          ("ours", tree_cap(tree, reference, blocks_of(blocks, defences, i), POLICY, blocks[i]))):
            found[name].append(len(truth & set(tree.heavy_hitters(blocks[i][1:], cap=cap).items)))
    return {"quality_windows": len(found["none"]),
            **{f"genuine_top_{name}": float(np.mean(v)) for name, v in found.items()}}


APPLIES: dict[str, Callable[[Mechanism], bool]] = {
    "single": lambda m: True, "ramp": lambda m: True,
    "under": lambda m: isinstance(m, FrequencyOracle | PCKV | NumericMechanism | PEM),
    "paced": lambda m: isinstance(m, FrequencyOracle | NumericMechanism),
    "demotion": lambda m: isinstance(m, FrequencyOracle | NumericMechanism | PCKV | PrefixTree),
    "honest": lambda m: True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--oracles", default="grr,oue,olh,pm,pem,pckv-grr")
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--honest-windows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--under-history", type=int, default=HISTORY,
                        help=f"honest windows before the attacker under the bound (default {HISTORY}; "
                             f"{DEMOTION_HISTORY}: the long block test's lagged windows too)")
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; of {SCENARIOS}")
    rng = np.random.default_rng(args.seed)
    targets = np.sort(rng.choice(DOMAIN, size=TARGETS, replace=False))
    rows: list[dict[str, Any]] = []
    for name in [o for o in args.oracles.split(",") if o]:
        for eps in [float(e) for e in args.epsilons.split(",")]:
            w = Windows(make(name, eps), args.n, rng, targets)
            runs: dict[str, Callable[[Windows], list[dict[str, Any]]]] = {
                "single": single, "ramp": lambda w: [ramp(w)], "under": lambda w: [under(w, args.under_history)],
                "paced": lambda w: [paced(w, args.under_history)],
                "demotion": lambda w: [demotion(w, args.runs)],
                "honest": lambda w: [honest_windows(w, args.honest_windows)]}
            for scenario in scenarios:
                if not APPLIES[scenario](w.mech):
                    continue
                t0 = time.perf_counter()
                for found in runs[scenario](w):
                    row = {"oracle": name, "epsilon": eps, "scenario": scenario, **found}
                    for key in ("raw_ref", "ours"):
                        if f"gain_{key}" in row:
                            row[f"removed_{key}"] = removed(row["gain_none"], row[f"gain_{key}"])
                    row["seconds"] = round(time.perf_counter() - t0, 1)
                    rows.append({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()})
                    print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
