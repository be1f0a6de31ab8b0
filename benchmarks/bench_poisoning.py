"""Attack harness for the poisoning defences (issue 28): the published attacks on every oracle, the gain they reach
with no defence, with Norm-Sub and with ours, the genuine reports set aside, and what detection costs.

Setup, per oracle and epsilon (one window of n reports, simulated in-process, vectorised):
- genuine devices: Zipf(1.0) over d = 1024 items (frequency oracles), over 10k random words (heavy hitters, PEM);
  a truncated normal (mean 0, sd 1/4) on [-1, 1] (numeric, PM); one key each, Zipf over 32 keys, values truncated
  normal around a mean per key (key-value, PCKV-GRR);
- a fraction beta of the window's n reports come from fake devices (n (1 - beta) genuine), promoting r target items
  drawn uniformly (frequency, key-value) or r strings absent from the population (heavy hitters); numeric attacks
  push the mean up;
- the reference: the collection's REFERENCE_WINDOWS earlier windows of n honest reports each, as the aggregator
  uses them (`ldpstream.aggregator.poisoning`). For the frequency oracles only its per-item support counts matter
  (the excess test reads the reference's estimates), so they are drawn from their exact marginals (Binomial(n_v, p)
  + Binomial(n - n_v, q) per item) instead of perturbing 4n reports; the others are perturbed.
Attacks (`ldpstream.simulator.poisoning`): maximal_gain (Cao et al. MGA; PM's largest output; PCKV M2GA),
random_item (RIA), random_value (RPA), input (input poisoning: the targets perturbed honestly), adaptive (an attacker
who knows the detectors: at most t - 1 targets per report, t the itemset threshold, and only enough crafted
reports to raise each target to 2.5 standard deviations under the excess bound; the other fakes report honestly).

Gains (Cao et al.'s frequency gain): sum over targets of (estimate with the fakes - estimate without them, from the
same genuine reports), for the raw unbiased estimate (`gain_none`), Norm-Sub's (`gain_norm_sub`), and the defended
one (`gain_ours`: the defence run on both windows). Numeric: the mean's rise (on [-1, 1]); key-value: the keys'
frequency gain plus their value total's gain (s = f m, values on [-1, 1]: a mean of a rare key is a ratio of
near-zero estimates, its gain noise; Norm-Sub there: the frequencies made consistent, |s| clipped to them); heavy
hitters: the targets' last-level estimates (raw; ours capped), whether a target makes the decoded top 20, and how
many strings of the honest window's top 20 the defence changes (its genuine harm: nothing is set aside from the
sketches, so `genuine_set_aside` is 0).
`gain_removed` = 1 - gain_ours / gain_none.
`genuine_set_aside`: genuine reports flagged by the per-report tests, plus what the tests on sums set aside beyond
the fakes the per-report tests left, over the genuine reports.

Cost: the aggregator's pure batch path (`PartitionProcessor.process`, what a worker does per micro-batch without
Kafka and Redis) and the audit's (`collect` + `audit_reports`) timed on the same wire messages (envelopes of 1000
reports) of one attacked window; the drop of a worker that also audited its windows is audit / (worker + audit).

Prints a table per oracle (stderr); on stdout a JSON line {"cost": [...]} (each frequency oracle's timing), then the
last line, JSON: a list of rows with oracle, epsilon, attack, beta, targets, gain_none, gain_norm_sub (null where no
Norm-Sub applies: heavy hitters), gain_ours, gain_removed (null without a gain), genuine_set_aside and, where the
table has one, its note (heavy hitters: the targets in the top 20; adaptive: the bound; maximal gain on r > 1
targets of a frequency oracle: how many of them the top r holds, raw and defended).
Run: .venv/bin/python benchmarks/bench_poisoning.py [--n 1000000] [--oracles grr,oue,olh,pem,pm,pckv-grr]
     [--quick]  (--quick: n = 100000, beta 0.05, r = 10, maximal_gain and adaptive only)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.aggregator.audit import audit_reports, collect
from ldpstream.aggregator.plans import Plan
from ldpstream.aggregator.processing import PartitionProcessor
from ldpstream.aggregator.store import WindowStats
from ldpstream.contract.spec import parse_spec
from ldpstream.contract.wire import AttributeColumns, encode_envelope, envelope_of
from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism, pairs_array
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.open_domain.strings import StringDomain
from ldpstream.mechanisms.open_domain.tree import PEM, suffixes
from ldpstream.mechanisms.poisoning.attribute import PER_REPORT, defend
from ldpstream.mechanisms.poisoning.base import Policy, bonferroni_z
from ldpstream.mechanisms.poisoning.frequency import item_bounds, report_threshold, supports_itemsets_apply
from ldpstream.mechanisms.poisoning.heavy import ReferenceCap
from ldpstream.mechanisms.postprocess import norm_sub
from ldpstream.runtime.dlq import Message
from ldpstream.simulator.poisoning import (
    Adaptive,
    fake_frequency_reports,
    fake_keyvalue_reports,
    fake_numeric_reports,
    fake_tree_reports,
)
from ldpstream.simulator.population import random_words, truncated_gaussian, zipf_probabilities

FREQUENCY = ("grr", "oue", "olh", "sue", "blh")
DEFAULT_ORACLES = ("grr", "oue", "olh", "pem", "pm", "pckv-grr")
ATTACKS = ("maximal_gain", "random_item", "random_value", "input", "adaptive")
REFERENCE_WINDOWS = 4
DOMAIN = 1024
KEYS = 32
WORDS = 10_000
ZIPF = 1.0
TOP = 20
ADAPTIVE_MARGIN = 2.5  # the adaptive attacker stays this many standard deviations under the excess bound
POLICY = Policy()
COST_REPORTS = 200_000  # the cost is measured on a window of this many of the attacked reports


@dataclass
class Row:
    oracle: str
    epsilon: float
    attack: str
    beta: float
    targets: int
    gain_none: float
    gain_norm_sub: float | None
    gain_ours: float
    gain_removed: float | None
    genuine_set_aside: float
    note: str = ""

    def json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "note" or v}
        for k in ("gain_none", "gain_norm_sub", "gain_ours", "gain_removed", "genuine_set_aside"):
            if out[k] is not None:
                out[k] = round(float(out[k]), 5)
        return out


def removed_fraction(none: float, ours: float) -> float | None:
    return None if none <= 1e-12 else 1.0 - ours / none


def concat(a: Reports, b: Reports) -> Reports:
    return {k: np.concatenate([np.asarray(a[k]), np.asarray(b[k]).astype(np.asarray(a[k]).dtype)]) for k in a}


def head(reports: Reports, rows: int) -> Reports:
    return {k: np.asarray(v)[:rows] for k, v in reports.items()}


@dataclass
class Defended:
    """A window's defence as the benchmark needs it: the defended block, the reports flagged per report, the sums
    tests' set-aside."""

    block: np.ndarray
    flagged: np.ndarray
    sums_set_aside: float


def defended(mech: Any, reports: Reports, block: np.ndarray, reference: np.ndarray | None) -> Defended:
    d = defend(mech, block, reference, reports=reports, policy=POLICY)
    n = int(block[0])
    flagged = np.zeros(n, dtype=bool)
    sums = 0.0
    for f in d.findings:
        if f.detector in PER_REPORT and f.flagged is not None:
            flagged |= f.flagged
        elif f.detector not in PER_REPORT:
            sums += f.set_aside
    return Defended(block - d.removed, flagged, sums)


def genuine_share(d: Defended, genuine: int) -> float:
    fakes = len(d.flagged) - genuine
    unflagged_fakes = fakes - int(d.flagged[genuine:].sum())
    return (int(d.flagged[:genuine].sum()) + max(0.0, d.sums_set_aside - unflagged_fakes)) / genuine


# --- frequency oracles ---------------------------------------------------------------------------------------------
def marginal_reference(oracle: FrequencyOracle, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Support counts of honest reports with true value counts `counts`, each item's from its exact marginal."""
    n = int(counts.sum())
    s = oracle.supports_per_report
    support = rng.binomial(s * counts, oracle.p) + rng.binomial(s * (n - counts), oracle.q)
    return np.append(support.astype(np.float64), float(n))


def frequency_rows(name: str, eps: float, n: int, betas: list[float], rs: list[int], attacks: list[str],
                   rng: np.random.Generator, targets_for: dict[int, np.ndarray]) -> tuple[list[Row], dict[str, Any]]:
    oracle = registry.make(name, eps, domain=DOMAIN)
    assert isinstance(oracle, FrequencyOracle)
    probs = zipf_probabilities(DOMAIN, ZIPF)
    values = rng.choice(DOMAIN, size=n, p=probs)
    started = time.perf_counter()
    genuine = oracle.perturb(values, rng)
    all_stats = oracle.accumulate(genuine)
    simulate_s = time.perf_counter() - started
    ref_counts = rng.multinomial(REFERENCE_WINDOWS * n, probs)
    reference = attribute_block(REFERENCE_WINDOWS * n, marginal_reference(oracle, ref_counts, rng))
    ref_est = oracle.estimate(reference[1:])
    rows: list[Row] = []
    cost: dict[str, Any] = {}
    for beta in betas:
        m = int(round(beta * n))
        g = n - m
        clean_reports = head(genuine, g)
        clean_stats = all_stats - oracle.accumulate({k: np.asarray(v)[g:] for k, v in genuine.items()})
        clean_block = attribute_block(g, clean_stats)
        est_clean = np.asarray(oracle.estimate(clean_stats).value)
        ns_clean = norm_sub(est_clean)
        def_clean = defended(oracle, clean_reports, clean_block, reference)
        f_def_clean = np.asarray(oracle.estimate(def_clean.block[1:]).value)
        for r in rs:
            targets = targets_for[r]
            for attack in attacks:
                adaptive = Adaptive()
                if attack == "adaptive":
                    adaptive = adaptive_limits(oracle, targets, ref_est, n)
                fakes = fake_frequency_reports(oracle, attack, targets, m, rng, adaptive)
                attacked = concat(clean_reports, fakes)
                stats = clean_stats + oracle.accumulate(fakes)
                block = attribute_block(n, stats)
                est = np.asarray(oracle.estimate(stats).value)
                d = defended(oracle, attacked, block, reference)
                f_def = np.asarray(oracle.estimate(d.block[1:]).value)
                none = float((est - est_clean)[targets].sum())
                ns = float((norm_sub(est) - ns_clean)[targets].sum())
                ours = float((f_def - f_def_clean)[targets].sum())
                note = ""
                if attack == "adaptive":
                    bound, base = item_bounds(oracle, oracle.estimate(stats), ref_est, POLICY)
                    note = f"bound {float((bound - base)[targets].sum()):.4f}"
                elif attack == "maximal_gain" and r > 1:  # what a reader of the top list sees
                    note = f"targets in the top {r}: {in_top(est, targets)} none, {in_top(f_def, targets)} ours"
                rows.append(Row(name, eps, attack, beta, r, none, ns, ours, removed_fraction(none, ours),
                                genuine_share(d, g), note))
                if attack == "maximal_gain" and beta == max(betas) and r == max(rs) and not cost:
                    cost = measure_cost(name, eps, oracle, attacked, reference)
                    cost["simulate_s"] = simulate_s
    return rows, cost


def in_top(f: np.ndarray, targets: np.ndarray) -> int:
    """How many of the targets the len(targets) largest estimates hold."""
    return len(set(np.argsort(-f)[:len(targets)].tolist()) & set(targets.tolist()))


def adaptive_limits(oracle: FrequencyOracle, targets: np.ndarray, ref_est: Estimate, n: int) -> Adaptive:
    """What the adaptive attacker derives from the published detectors and the reference's published estimates."""
    per_report = None
    if supports_itemsets_apply(oracle):
        threshold = report_threshold(oracle, targets, POLICY.alpha_report)
        per_report = None if threshold is None else threshold[0] - 1
    window = Estimate(n=n, value=ref_est.value, stderr=ref_est.stderr * math.sqrt(REFERENCE_WINDOWS))
    bound, base = item_bounds(oracle, window, ref_est, POLICY)
    sd = np.sqrt(window.stderr ** 2 + ref_est.stderr ** 2)  # of the window's rise over the reference
    rise = float(np.min(((bound - base) - ADAPTIVE_MARGIN * sd)[targets]))
    return Adaptive(per_report, max(rise, 0.0), n)


# --- heavy hitters -------------------------------------------------------------------------------------------------
def pem_rows(eps: float, n: int, betas: list[float], rs: list[int], attacks: list[str],
             rng: np.random.Generator) -> list[Row]:
    domain = StringDomain(8, "abcdefghijklmnopqrstuvwxyz")
    tree = PEM(eps, domain, seed=11, top=TOP)
    words = [w.decode() for w in random_words(WORDS + 64, rng, max_length=8)]
    population, absent = words[:WORDS], words[WORDS:]
    probs = zipf_probabilities(WORDS, ZIPF)
    rows_pop = domain.encode(population)
    genuine = tree.perturb(rows_pop[rng.choice(WORDS, size=n, p=probs)], rng)
    reference = np.zeros(tree.stats_size)
    for _ in range(REFERENCE_WINDOWS):
        reference += tree.accumulate(tree.perturb(rows_pop[rng.choice(WORDS, size=n, p=probs)], rng))
    ref_block = attribute_block(REFERENCE_WINDOWS * n, reference)
    out = []
    for beta in betas:
        m = int(round(beta * n))
        g = n - m
        clean = head(genuine, g)
        clean_stats = tree.accumulate(clean)
        # what the defence does to an honest window's top list (the genuine harm: nothing is removed from sketches):
        # the genuine strings it finds with and without (the others are PEM's noise winners)
        honest_raw = set(tree.heavy_hitters(clean_stats).items) & set(population)
        honest_ours = set(tree.heavy_hitters(clean_stats, cap=ReferenceCap(tree, ref_block[1:], POLICY)).items)
        honest_found = f"{len(honest_raw)} none, {len(honest_ours & set(population))} ours"
        for r in rs:
            targets = absent[:r]
            for attack in attacks:
                carriers = None
                if attack == "adaptive":
                    carriers = tree_carriers(tree, ref_block, n, r)
                fakes = fake_tree_reports(tree, attack, targets, m, rng, carriers, decoys=population[:50])
                stats = clean_stats + tree.accumulate(fakes)
                raw_t = tree.frequencies(stats, targets).value
                raw_c = tree.frequencies(clean_stats, targets).value
                cap = ReferenceCap(tree, ref_block[1:], POLICY)
                capped_t = capped(tree, cap, stats, targets)
                capped_c = capped(tree, ReferenceCap(tree, ref_block[1:], POLICY), clean_stats, targets)
                top_raw = set(tree.heavy_hitters(stats).items)
                top_ours = set(tree.heavy_hitters(stats, cap=ReferenceCap(tree, ref_block[1:], POLICY)).items)
                none, ours = float((raw_t - raw_c).sum()), float((capped_t - capped_c).sum())
                note = (f"targets in top {TOP}: {len(top_raw & set(targets))} none, {len(top_ours & set(targets))} "
                        f"ours; honest window: genuine strings in top {TOP}: {honest_found}")
                out.append(Row("pem", eps, attack, beta, r, none, None, ours, removed_fraction(none, ours), 0.0,
                               note))
    return out


def capped(tree: PEM, cap: ReferenceCap, stats: np.ndarray, targets: list[str]) -> np.ndarray:
    """The targets' last-level estimates as the defence ranks them (`ReferenceCap`: a suspect at its reference
    frequency, any other at most one standard deviation of its rise above it), tested as one of the decode's
    candidates there (the beam's extensions)."""
    cap = dataclasses.replace(cap, tests=tree.beam * len(suffixes(tree.domain, tree.step)), capped={}, raised={})
    rows = tree.domain.encode(targets)
    est = tree.frequencies(stats, targets)
    last = tree.levels - 1
    n = int(tree.oracles[last].z_table(tree.level_stats(stats, last))[1])
    return np.asarray(cap(last, rows, np.asarray(est.value), n, TOP))


def tree_carriers(tree: PEM, ref_block: np.ndarray, n: int, r: int) -> int:
    """Crafted reports that raise each target about ADAPTIVE_MARGIN sds under the cap of a string new to the window:
    z sqrt(2 V(0) / n_T) at each level's n_T ~ n / levels."""
    oracle = tree.oracles[-1]
    n_t = n / tree.levels
    var = float(oracle.variance(0.0))
    z = bonferroni_z(POLICY.alpha_window / tree.levels, tree.beam * 27 ** tree.step)
    rise = max(0.0, (z - ADAPTIVE_MARGIN) * math.sqrt(2 * var / n_t))
    # a crafted report names its target's bucket: it adds (1 - q)/(p - q) / n_T to the target at its level
    gain = (1 - oracle.q) / (oracle.p - oracle.q) / n_t
    return int(rise / gain * r / tree.levels * tree.levels)


# --- numeric -------------------------------------------------------------------------------------------------------
def pm_rows(eps: float, n: int, betas: list[float], attacks: list[str], rng: np.random.Generator) -> list[Row]:
    mech = registry.make("pm", eps)
    assert isinstance(mech, NumericMechanism)
    values = truncated_gaussian(0.0, 0.25, n, rng)
    genuine = mech.perturb(values, rng)
    reference = attribute_block(REFERENCE_WINDOWS * n, mech.accumulate(
        mech.perturb(truncated_gaussian(0.0, 0.25, REFERENCE_WINDOWS * n, rng), rng)))
    ref_est = mech.estimate(reference[1:])
    out = []
    for beta in betas:
        m = int(round(beta * n))
        g = n - m
        clean = head(genuine, g)
        clean_block = attribute_block(g, mech.accumulate(clean))
        mean_clean = float(mech.estimate(clean_block[1:]).value)
        def_clean = defended(mech, clean, clean_block, reference)
        ours_clean = float(mech.estimate(def_clean.block[1:]).value)
        for attack in attacks:
            low = None
            if attack == "adaptive":
                per_report = float(ref_est.stderr) ** 2 * ref_est.n
                z = bonferroni_z(POLICY.alpha_window, 2)
                rise = (z - ADAPTIVE_MARGIN) * math.sqrt(per_report / n + per_report / ref_est.n)
                top = mech.output_range[1]
                carriers = int(rise * n / ((1 + top) / 2 - float(ref_est.value)))
                fakes = concat(fake_numeric_reports(mech, "adaptive", min(m, carriers), rng, low),
                               mech.perturb(truncated_gaussian(0.0, 0.25, m - min(m, carriers), rng), rng))
            else:
                fakes = fake_numeric_reports(mech, attack, m, rng)
            attacked = concat(clean, fakes)
            block = attribute_block(n, mech.accumulate(attacked))
            mean = float(mech.estimate(block[1:]).value)
            d = defended(mech, attacked, block, reference)
            ours = float(mech.estimate(d.block[1:]).value)
            none = mean - mean_clean
            ns = float(np.clip(mean, -1, 1) - np.clip(mean_clean, -1, 1))  # clipping: the numeric post-processing
            out.append(Row("pm", eps, attack, beta, 1, none, ns, ours - ours_clean,
                           removed_fraction(none, ours - ours_clean), genuine_share(d, g)))
    return out


# --- key-value -----------------------------------------------------------------------------------------------------
def keyvalue_population(n: int, rng: np.random.Generator, means: np.ndarray) -> np.ndarray:
    keys = rng.choice(KEYS, size=n, p=zipf_probabilities(KEYS, ZIPF))
    values = np.clip(means[keys] + 0.25 * rng.standard_normal(n), -1, 1)
    pairs = np.full((n, 1, 2), -1.0)
    pairs[:, 0, 0] = keys
    pairs[:, 0, 1] = values
    return pairs


def keyvalue_rows(name: str, eps: float, n: int, betas: list[float], rs: list[int], attacks: list[str],
                  rng: np.random.Generator) -> list[Row]:
    mech = registry.make_keyvalue(name, eps, KEYS)
    assert isinstance(mech, KeyValueMechanism)
    means = rng.uniform(-0.5, 0.5, KEYS)
    genuine = mech.perturb(keyvalue_population(n, rng, means), rng)
    reference = attribute_block(REFERENCE_WINDOWS * n, mech.accumulate(
        mech.perturb(keyvalue_population(REFERENCE_WINDOWS * n, rng, means), rng)))
    out = []
    for beta in betas:
        m = int(round(beta * n))
        g = n - m
        clean = head(genuine, g)
        clean_block = attribute_block(g, mech.accumulate(clean))
        for r in rs:
            targets = rng.choice(KEYS, size=r, replace=False)
            for attack in attacks:
                if attack == "maximal_gain":
                    fakes = fake_keyvalue_reports(mech, targets, m, rng)
                elif attack in ("random_item", "input"):
                    pairs = pairs_array([{int(t): 1.0} for t in targets[np.arange(m) % r]])
                    fakes = mech.perturb(pairs, rng)
                else:
                    continue  # random_value and adaptive: not simulated for key-value
                attacked = concat(clean, fakes)
                block = attribute_block(n, mech.accumulate(attacked))
                figures = []
                for b, reports in ((block, attacked), (clean_block, clean)):
                    f, s = np.asarray(mech.estimate(b[1:]).value)
                    consistent = norm_sub(f)
                    d = defended(mech, reports, b, reference)
                    f_d, s_d = np.asarray(mech.estimate(d.block[1:]).value)
                    figures.append(((f, s), (consistent, np.clip(s, -consistent, consistent)), (f_d, s_d), d))
                (raw1, ns1, ours1, d1), (raw0, ns0, ours0, _) = figures

                def gain(after: tuple[np.ndarray, np.ndarray], before: tuple[np.ndarray, np.ndarray],
                         t: np.ndarray = targets) -> float:
                    return float((after[0] - before[0])[t].sum() + (after[1] - before[1])[t].sum())
                none, ours = gain(raw1, raw0), gain(ours1, ours0)
                out.append(Row(name, eps, attack, beta, r, none, gain(ns1, ns0), ours, removed_fraction(none, ours),
                               genuine_share(d1, g)))
    return out


# --- cost ----------------------------------------------------------------------------------------------------------
def measure_cost(name: str, eps: float, oracle: FrequencyOracle, reports: Reports,
                 reference: np.ndarray) -> dict[str, Any]:
    """Worker path vs audit path on the same wire messages of COST_REPORTS reports (module docstring)."""
    reports = head(reports, COST_REPORTS)
    values = [f"v{i}" for i in range(oracle.domain_size)]
    spec = parse_spec(json.dumps({"name": "bench_poisoning", "version": 1, "epsilon": eps, "sampling": 1,
                                  "partitions": 1, "windows": ["1h"], "attributes": [
                                      {"name": "item", "type": "categorical", "values": values, "mechanism": name}]}))
    plan = Plan(spec)
    n = len(next(iter(reports.values())))
    now = int(time.time() * 1000)
    start = now // 3_600_000 * 3_600_000
    messages = []
    per = 1000
    for i, lo in enumerate(range(0, n, per)):
        hi = min(n, lo + per)
        cols = {k: np.asarray(v)[lo:hi] for k, v in reports.items()}
        env = envelope_of(spec.name, 1, np.arange(lo + 1, hi + 1, dtype=np.uint64), np.full(hi - lo, start + 1000),
                          {0: AttributeColumns(np.arange(hi - lo, dtype=np.uint32), cols)})
        messages.append(Message(i, encode_envelope(env), None, 0))
    processor = PartitionProcessor(lambda c, v, _: plan if (c, v) == (spec.name, 1) else None, lambda: start + 2000)
    started = time.perf_counter()
    for lo in range(0, len(messages), 100):  # micro-batches of 100 messages (100k reports)
        processor.process(spec.topic, messages[lo:lo + 100])
    worker_s = time.perf_counter() - started
    started = time.perf_counter()
    window = collect(plan, messages, "1h", start)
    collect_s = time.perf_counter() - started
    live = WindowStats(float(n), {0: attribute_block(n, oracle.accumulate(reports))})
    started = time.perf_counter()
    audit = audit_reports(plan, live, window, WindowStats(float(reference[0]), {0: reference}), REFERENCE_WINDOWS,
                          POLICY)
    detect_s = time.perf_counter() - started
    audit_s = collect_s + detect_s
    return {"oracle": name, "epsilon": eps, "reports": n, "worker_us_per_report": 1e6 * worker_s / n,
            "audit_us_per_report": 1e6 * audit_s / n, "detect_us_per_report": 1e6 * detect_s / n,
            "worker_drop_if_audited_in_process": audit_s / (worker_s + audit_s),
            "set_aside_messages": len(audit.set_aside)}


# --- main ----------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--oracles", default=",".join(DEFAULT_ORACLES))
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--betas", default="0.01,0.05")
    parser.add_argument("--targets", default="1,10")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.betas, args.targets, args.attacks = 100_000, "0.05", "10", "maximal_gain,adaptive"
    n = args.n
    oracles = [o for o in args.oracles.split(",") if o]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    betas = [float(b) for b in args.betas.split(",")]
    rs = [int(r) for r in args.targets.split(",")]
    attacks = [a for a in args.attacks.split(",") if a]
    rng = np.random.default_rng(args.seed)
    targets_for = {r: np.sort(rng.choice(DOMAIN, size=r, replace=False)) for r in rs}
    rows: list[Row] = []
    costs: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in oracles:
        for eps in epsilons:
            t0 = time.perf_counter()
            if name in FREQUENCY:
                found, cost = frequency_rows(name, eps, n, betas, rs, attacks, rng, targets_for)
                if cost:
                    costs.append(cost)
            elif name == "pem":
                found = pem_rows(eps, n, betas, rs, attacks, rng)
            elif name == "pm":
                found = pm_rows(eps, n, betas, attacks, rng)
            elif name.startswith("pckv"):
                found = keyvalue_rows(name, eps, n, betas, rs, attacks, rng)
            else:
                raise SystemExit(f"unknown oracle {name!r}")
            rows += found
            print_rows(found, f"{name} eps={eps:g} n={n} ({time.perf_counter() - t0:.0f} s)")
    for cost in costs:
        print(f"cost {cost['oracle']} eps={cost['epsilon']:g}: worker {cost['worker_us_per_report']:.2f} us/report, "
              f"audit {cost['audit_us_per_report']:.2f} us/report (detectors {cost['detect_us_per_report']:.2f}); "
              f"a worker auditing in-process drops by {100 * cost['worker_drop_if_audited_in_process']:.0f}%",
              file=sys.stderr)
    print(f"total {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(json.dumps({"cost": costs}))
    print(json.dumps([r.json() for r in rows]))
    return 0


def print_rows(rows: list[Row], title: str) -> None:
    out: Callable[..., None] = print
    out(f"\n{title}", file=sys.stderr)
    out(f"{'attack':<13} {'beta':>5} {'r':>3} {'none':>9} {'norm_sub':>9} {'ours':>9} {'removed':>8} "
        f"{'genuine':>8}  note", file=sys.stderr)
    for r in rows:
        ns = "-" if r.gain_norm_sub is None else f"{r.gain_norm_sub:9.4f}"
        removed = "-" if r.gain_removed is None else f"{100 * r.gain_removed:7.1f}%"
        out(f"{r.attack:<13} {r.beta:>5g} {r.targets:>3} {r.gain_none:9.4f} {ns:>9} {r.gain_ours:9.4f} "
            f"{removed:>8} {100 * r.genuine_set_aside:7.3f}%  {r.note}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
