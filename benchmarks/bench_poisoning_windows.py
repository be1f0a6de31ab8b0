"""Fake devices over time (issue 42): attacks across consecutive windows, against the defence as the aggregator runs
it (each window defended against the sum of its four earlier windows, defended, and the sequential test's sums
carried along: `ldpstream.mechanisms.poisoning.attribute.defend_windows`), next to the references of before (the raw
sums of the four earlier windows, no sequential test: "raw ref").

Per oracle and epsilon, windows of n genuine reports (frequency oracles: Zipf(1.0) over d = 1024 items, each window's
support counts drawn from their exact marginals, as `bench_poisoning.marginal_reference`; PM: a truncated normal,
perturbed), four honest windows first, then:
- `ramp`: ten windows of maximal-gain fakes on r = 10 targets (PM: the largest output), their share rising
  1%, 2%, ..., 10% of the window's reports; the gain at the last window;
- `under`: ten windows in which an attacker who knows the published (defended) reference and the per-window bound
  crafts just enough maximal-gain reports (from 5% fakes, the rest honest) to raise each target to 2.5 standard
  deviations under the bound over that reference (`bench_poisoning.adaptive_limits`'s rule), each window: its rise
  over the genuine frequency is that allowance plus what its earlier windows left in the reference (the mean of
  its rises there), so a reference that takes in its windows raises it window after window; the gain after ten
  windows against its first window's (the one-window adaptive gain), and the first window the alert fires;
- `demotion`: ten windows of 5% fakes supporting none of r = 1 target, the most frequent item (PM: the smallest
  output), over `--runs` seeds: how often it is found in the first window and within ten, and the gain (negative)
  left at the first and the last window;
- `honest`: `--honest-windows` honest windows: windows with any finding suspected (false alarms) and the genuine
  reports set aside.
Gain: sum over the targets of (estimate with the fakes - estimate of the same genuine reports without them), each
side defended by its own chain. `removed` = 1 - ours / none. The alert fires in a window when any finding of the
attribute is suspected (what `ldp estimate` and the metrics show as the alert beside the fraction set aside).

Prints a table (stderr) and, last on stdout, JSON rows: oracle, epsilon, scenario, beta, gain_none, gain_raw_ref,
gain_ours, removed_raw_ref, removed_ours, alerts (windows with an alert, of the attacked ones), and per scenario
its extra fields (under: one_window_gain, ratio, first_alert; demotion: detected_first_window,
detected_within_ten, runs, mean_first_alert and the gains at the first and last window; honest: windows,
false_alarms, genuine_set_aside).
Run: .venv/bin/python benchmarks/bench_poisoning_windows.py [--n 1000000] [--oracles grr,oue,olh,pm]
     [--epsilons 1,4] [--scenarios ramp,under,demotion,honest] [--runs 10] [--honest-windows 200] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from bench_poisoning import ADAPTIVE_MARGIN, DOMAIN, POLICY, REFERENCE_WINDOWS, ZIPF, marginal_reference

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate, Mechanism, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle
from ldpstream.mechanisms.mixed import attribute_block
from ldpstream.mechanisms.numeric.base import NumericMechanism
from ldpstream.mechanisms.poisoning.attribute import Defence, defend, defend_windows, reference_of
from ldpstream.mechanisms.poisoning.base import SUSPECTED
from ldpstream.mechanisms.poisoning.frequency import item_bounds, report_threshold, supports_itemsets_apply
from ldpstream.simulator.poisoning import Adaptive, fake_frequency_reports, fake_numeric_reports
from ldpstream.simulator.population import truncated_gaussian, zipf_probabilities

SCENARIOS = ("ramp", "under", "demotion", "honest")
ATTACKED = 10
TARGETS = 10
UNDER_BETA = 0.05
DEMOTION_BETA = 0.05


class Windows:
    """One oracle's windows: genuine blocks drawn fresh, fakes' statistics added."""

    def __init__(self, mech: Mechanism, n: int, rng: np.random.Generator) -> None:
        self.mech, self.n, self.rng = mech, n, rng
        self.probs = zipf_probabilities(DOMAIN, ZIPF)

    def genuine(self) -> np.ndarray:
        if isinstance(self.mech, FrequencyOracle):
            return attribute_block(self.n, marginal_reference(self.mech, self.rng.multinomial(self.n, self.probs),
                                                              self.rng))
        assert isinstance(self.mech, NumericMechanism)
        return attribute_block(self.n, self.mech.accumulate(self.mech.perturb(
            truncated_gaussian(0.0, 0.25, self.n, self.rng), self.rng)))

    def with_fakes(self, block: np.ndarray, fakes: Reports) -> np.ndarray:
        m = len(next(iter(fakes.values())))
        return block + attribute_block(m, self.mech.accumulate(fakes))

    def fakes(self, attack: str, targets: np.ndarray, m: int, adaptive: Adaptive = Adaptive()) -> Reports:
        if isinstance(self.mech, FrequencyOracle):
            return fake_frequency_reports(self.mech, attack, targets, m, self.rng, adaptive)
        assert isinstance(self.mech, NumericMechanism)
        return fake_numeric_reports(self.mech, attack, m, self.rng)


def value(mech: Mechanism, block: np.ndarray, d: Defence | None, targets: np.ndarray) -> float:
    """The targets' summed estimate (a numeric mean), of the block less what the defence removed."""
    kept = block if d is None else block - d.removed
    est = np.atleast_1d(np.asarray(mech.estimate(kept[1:]).value))
    return float(est[targets].sum()) if isinstance(mech, FrequencyOracle) else float(est[0])


def raw_chain(mech: Mechanism, blocks: Sequence[np.ndarray]) -> list[Defence | None]:
    """The references of before: the raw sum of the four earlier windows, no sequential test."""
    return [defend(mech, b, np.sum(blocks[max(0, i - REFERENCE_WINDOWS):i], axis=0) if i else None, policy=POLICY)
            for i, b in enumerate(blocks)]


def ours(mech: Mechanism, blocks: Sequence[np.ndarray]) -> list[Defence | None]:
    return defend_windows(mech, blocks, policy=POLICY, reference_windows=REFERENCE_WINDOWS)


def alert(d: Defence | None) -> bool:
    return d is not None and any(f.status == SUSPECTED for f in d.findings)


def gains(mech: Mechanism, attacked: list[np.ndarray], honest: list[np.ndarray], targets: np.ndarray,
          at: int) -> dict[str, float]:
    """Gain at window `at` with no defence, with the raw references and with ours (module docstring)."""
    out = {"gain_none": value(mech, attacked[at], None, targets) - value(mech, honest[at], None, targets)}
    for name, run in (("raw_ref", raw_chain), ("ours", ours)):
        a, h = run(mech, attacked), run(mech, honest)
        out[f"gain_{name}"] = value(mech, attacked[at], a[at], targets) - value(mech, honest[at], h[at], targets)
    return out


def removed(none: float, left: float) -> float | None:
    return None if abs(none) < 1e-12 else 1.0 - left / none


def ramp(w: Windows, targets: np.ndarray) -> dict[str, Any]:
    honest = [w.genuine() for _ in range(REFERENCE_WINDOWS + ATTACKED)]
    attacked = list(honest[:REFERENCE_WINDOWS])
    for t in range(ATTACKED):
        beta = 0.01 * (t + 1)
        m = int(round(beta * w.n / (1 - beta)))
        attacked.append(w.with_fakes(honest[REFERENCE_WINDOWS + t], w.fakes("maximal_gain", targets, m)))
    row = gains(w.mech, attacked, honest, targets, len(attacked) - 1)
    defences = ours(w.mech, attacked)
    row["alerts"] = sum(alert(d) for d in defences[REFERENCE_WINDOWS:])
    return {"beta": 0.1, **row}


def under(w: Windows, targets: np.ndarray) -> dict[str, Any]:
    """The attacker under the bound, window by window against the chain as published so far."""
    mech = w.mech
    assert isinstance(mech, FrequencyOracle)
    m = int(round(UNDER_BETA * w.n / (1 - UNDER_BETA)))
    per_report = None
    if supports_itemsets_apply(mech):
        threshold = report_threshold(mech, targets, POLICY.alpha_report)
        per_report = None if threshold is None else threshold[0] - 1
    honest = [w.genuine() for _ in range(REFERENCE_WINDOWS + ATTACKED)]
    attacked = list(honest[:REFERENCE_WINDOWS])
    first_alert = None
    series = []
    rises: list[float] = []
    for t in range(ATTACKED):
        defences = ours(mech, attacked)
        reference = reference_of(attacked, defences, len(attacked), REFERENCE_WINDOWS)
        assert reference is not None
        ref_est = mech.estimate(reference[1:])
        window = Estimate(n=w.n + m, value=ref_est.value, stderr=ref_est.stderr * np.sqrt(REFERENCE_WINDOWS))
        bound, base = item_bounds(mech, window, ref_est, POLICY)
        sd = np.sqrt(window.stderr ** 2 + ref_est.stderr ** 2)
        allowed = float(max(0.0, np.min(((bound - base) - ADAPTIVE_MARGIN * sd)[targets])))
        kept = [rises[i] for i in range(max(0, t - REFERENCE_WINDOWS), t)  # its rises the reference holds
                if defences[REFERENCE_WINDOWS + i] is not None and not alert(defences[REFERENCE_WINDOWS + i])]
        rise = allowed + (float(np.mean(kept)) * len(kept) / REFERENCE_WINDOWS if kept else 0.0)
        rises.append(rise)
        fakes = w.fakes("adaptive", targets, m, Adaptive(per_report, rise, w.n + m))
        attacked.append(w.with_fakes(honest[REFERENCE_WINDOWS + t], fakes))
        d = ours(mech, attacked)
        if first_alert is None and alert(d[-1]):
            first_alert = t + 1
        series.append(d)
    one = gains(mech, attacked, honest, targets, REFERENCE_WINDOWS)
    row = gains(mech, attacked, honest, targets, len(attacked) - 1)
    row.update(one_window_gain=one["gain_ours"], first_alert=first_alert,
               ratio=row["gain_ours"] / one["gain_ours"] if one["gain_ours"] > 1e-12 else None,
               alerts=sum(alert(d) for d in series[-1][REFERENCE_WINDOWS:]))
    return {"beta": UNDER_BETA, **row}


def demotion(w: Windows, runs: int) -> dict[str, Any]:
    """Ten windows of 5% fakes demoting the top item, `runs` times: found in the first window, found within ten,
    and the gain (negative) left at the first and the last window."""
    target = np.array([int(np.argmax(w.probs))]) if isinstance(w.mech, FrequencyOracle) else np.array([0])
    m = int(round(DEMOTION_BETA * w.n / (1 - DEMOTION_BETA)))
    first, within, when = 0, 0, []
    out: dict[str, list[float]] = {}
    for _ in range(runs):
        honest = [w.genuine() for _ in range(REFERENCE_WINDOWS + ATTACKED)]
        attacked = honest[:REFERENCE_WINDOWS] + [w.with_fakes(b, w.fakes("demotion", target, m))
                                                 for b in honest[REFERENCE_WINDOWS:]]
        found = [d is not None and any(f.status == SUSPECTED and (not isinstance(w.mech, FrequencyOracle)
                                                                   or int(target[0]) in f.suspects)
                                       for f in d.findings) for d in ours(w.mech, attacked)[REFERENCE_WINDOWS:]]
        first += found[0]
        within += any(found)
        if any(found):
            when.append(found.index(True) + 1)
        for at, label in ((REFERENCE_WINDOWS, "first"), (len(attacked) - 1, "last")):
            for key, gain in gains(w.mech, attacked, honest, target, at).items():
                out.setdefault(f"{key}_{label}", []).append(gain)
    row: dict[str, Any] = {k: float(np.mean(v)) for k, v in out.items()}
    return {"beta": DEMOTION_BETA, "gain_none": row["gain_none_first"], "gain_raw_ref": row["gain_raw_ref_first"],
            "gain_ours": row["gain_ours_first"], **row, "detected_first_window": first,
            "detected_within_ten": within, "runs": runs, "mean_first_alert": float(np.mean(when)) if when else None}


def honest_windows(w: Windows, windows: int) -> dict[str, Any]:
    blocks = [w.genuine() for _ in range(windows + REFERENCE_WINDOWS)]
    defences = ours(w.mech, blocks)[REFERENCE_WINDOWS:]
    set_aside = sum(f.set_aside for d in defences if d is not None for f in d.findings)
    return {"beta": 0.0, "windows": windows, "false_alarms": sum(alert(d) for d in defences),
            "genuine_set_aside": set_aside / (windows * w.n)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--oracles", default="grr,oue,olh,pm")
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--honest-windows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
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
            mech = registry.make(name, eps, domain=DOMAIN) if registry.takes_domain(name) else registry.make(name, eps)
            w = Windows(mech, args.n, rng)
            runs: dict[str, Callable[[Windows], dict[str, Any]]] = {
                "ramp": lambda w: ramp(w, targets), "under": lambda w: under(w, targets),
                "demotion": lambda w: demotion(w, args.runs),
                "honest": lambda w: honest_windows(w, args.honest_windows)}
            for scenario in scenarios:
                if scenario == "under" and not isinstance(mech, FrequencyOracle):
                    continue  # the under-the-bound attacker is written for the frequency oracles' bound
                t0 = time.perf_counter()
                row = {"oracle": name, "epsilon": eps, "scenario": scenario, **runs[scenario](w)}
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
