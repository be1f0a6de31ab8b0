"""Poisoning detectors for key-value collection (PCKV-UE and PCKV-GRR), on the additive statistics alone.

Wu et al., "Poisoning Attacks to Local Differential Privacy Protocols for Key-Value Data" (USENIX Security 2022):
fake devices report target keys with the largest value (M2GA) to raise both a key's frequency and its mean. PCKV's
statistics per key are the centred support sum F = sum (X - b) and the value sum Y (`ldpstream.mechanisms.keyvalue.
base`), with f_hat = F / (c_f n) and s_hat = Y / (c_s n) the frequency and the value total s = f m, c_f = rho G_f,
c_s = rho G_s.

**Disagreement** (`keyvalue_disagreement`). Values lie in [-1, 1], so every key has |s| <= f: its value reports and
its key reports agree. An honest window shows sigma s_hat - f_hat <= z sd (sigma = +-1; sd from the mechanism's exact
per-device covariance at the estimates, z Bonferroni over the 2 d tests at alpha_window). A fake (k, +1) report adds
1/c_s to n s_hat and only (1 - b)/c_f < 1/c_s to n f_hat (G_s = a (2p - 1) < G_f), so M2GA fakes break it. Recovery
(derived here): setting aside x fake (k, sigma) reports, each of which contributed (1 - b) to F_k, sigma to Y_k and,
for PCKV-GRR, -b to every other key's F (a PCKV-UE fake fills its other entries at the honest rate b: 0 on average),
brings sigma s - f back to the bound delta when

    x = n (delta - D) / (delta + (1 - b) / c_f - 1 / c_s),    D = sigma s_hat - f_hat.

**Key frequency** (`key_frequency_bound`): a key whose frequency rose above its reference's bound, as a frequency
oracle's excess claims (`ldpstream.mechanisms.poisoning.frequency`), brought back to its reference frequency l_k (a
held key: its level) by setting aside x = (F - c_f l_k n) / ((1 - b) - c_f l_k) reports of (k, sigma), sigma the
side to which the key's value total moved.

**Over windows.** PCKV's key frequencies are a frequency oracle's: a report names key k (S_k = F_k + b n of them)
with probability q + (p - q) f_k, q = b and p - q = c_f, and n Var[f_hat] is `frequency_variance` (`KeyOracle`). The
same tests over windows as a frequency oracle's (`ldpstream.mechanisms.poisoning.sequential`: CUSUM, block, long
block, with the same budget) run on them, and a key they find rising is held to the level they give
(`key_frequency_bound`'s `held`) by setting aside (k, sigma) reports as above, which takes the fakes' values with
them; sigma is the side to which the key's value total moved from the reference's (fakes of (k, sigma) move it by
sigma / c_s each; the key's mean, s / f, is no guide once f is brought near 0). A key they find falling raises the
alert and is not given back: a PCKV-GRR fake of any key lowers every other key's centred support by b, which
setting the fakes aside restores, so the falls the tests see during a promotion are mostly its side effect, and
giving them back on top overshot (a ramp at eps 1: -0.61 left of 6.69, 109% removed, against 93.7% without).

Both recoveries set aside at most the reports that name the key with that sign (`carriers`, counted exactly): a
recovery's x can otherwise exceed every report that could be a fake of the key (PCKV-GRR at eps = 1, where the
disagreement's denominator is small: a ramp's defended gain was 14.4 against 6.7 undefended). The disagreement's
also brings the key's frequency no lower than -z sd (its least honest estimate, f >= 0): where its denominator is
small it would otherwise set aside every carrier, down to f_hat = -1.16 (a ramp at eps 1, the key held by the tests
over windows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.frequency.base import split_count
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.keyvalue.pckv import PCKV, PCKVGRR
from ldpstream.mechanisms.poisoning.base import SUSPECTED, UNTESTED, Finding, Policy, bonferroni_z, clean, too_few

DISAGREEMENT = "keyvalue_disagreement"
KEY_FREQUENCY = "key_frequency"
MAX_SET_ASIDE = 0.5


@dataclass(frozen=True)
class KeyOracle:
    """PCKV's key frequencies as a frequency oracle's (`ldpstream.mechanisms.poisoning.frequency.Supports`; module
    docstring, over windows): a report names key k with probability q + (p - q) f_k, q = b, p - q = c_f."""

    mech: PCKV

    @property
    def domain_size(self) -> int:
        return self.mech.domain_size

    @property
    def p(self) -> float:
        return self.mech.b + self.mech.holder_rate * self.mech.frequency_gain

    @property
    def q(self) -> float:
        return self.mech.b

    @property
    def supports_per_report(self) -> int:
        return 1

    def variance(self, frequencies: np.ndarray | float) -> np.ndarray:
        """n Var[f_hat_k] for fixed devices (`frequency_variance`)."""
        return self.mech.frequency_variance(frequencies)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """The key frequencies' estimate of PCKV statistics (row 0 of `estimate`)."""
        est = self.mech.estimate(stats)
        return Estimate(est.n, np.asarray(est.value)[0], np.asarray(est.stderr)[0])


def _constants(mech: PCKV) -> tuple[float, float, float, float]:
    """(c_f, c_s, b, what a fake report adds to every other key's centred support)."""
    c_f = mech.holder_rate * mech.frequency_gain
    c_s = mech.holder_rate * mech.value_gain
    return c_f, c_s, mech.b, (-mech.b if isinstance(mech, PCKVGRR) else 0.0)


def _untested(detector: str, mech: KeyValueMechanism, n: int) -> Finding:
    return Finding(detector, UNTESTED, n, detail=f"{mech.name}: this detector knows PCKV's reports only")


def _removal(mech: PCKV, keys: np.ndarray, counts: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """The statistics of `counts[i]` fake (keys[i], signs[i]) reports (module docstring)."""
    d = mech.domain_size
    _, _, b, other = _constants(mech)
    removed = np.zeros(mech.stats_size)
    removed[:d] = other * counts.sum()  # every fake adds `other` to each key's centred support...
    np.add.at(removed, keys, counts * ((1 - b) - other))  # ...and 1 - b to its own key's instead
    np.add.at(removed, d + keys, signs * counts)
    removed[-1] = counts.sum()
    return removed


def carriers(mech: PCKV, stats: np.ndarray, count: float, keys: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Per (key, sign), the reports that name the key with that sign: (S_k + sigma Y_k) / 2, S_k = F_k + b n the
    reports that name k (F is centred by b per report) and Y_k their signs' sum. Fake (k, sigma) reports are among
    them, so no more than these are set aside for it (an exact count, where the recovery's x is an estimate)."""
    d = mech.domain_size
    stats = np.asarray(stats, dtype=np.float64)
    return np.maximum(0.0, (stats[keys] + mech.b * count + signs * stats[d + keys]) / 2)


def keyvalue_disagreement(mech: KeyValueMechanism, stats: np.ndarray, policy: Policy = Policy()) -> Finding:
    """Keys whose value reports say more than their key reports allow (|s| > f), brought back (module docstring).

    One key at a time, the most disagreeing first: a PCKV-GRR fake also lowers every other key's frequency (by b /
    c_f per report), which can make an honest key disagree until the fakes are set aside."""
    _, n = split_count(stats, mech.stats_size)
    if not isinstance(mech, PCKV):
        return _untested(DISAGREEMENT, mech, n)
    if n < policy.min_reports:
        return too_few(DISAGREEMENT, n, policy)
    z = bonferroni_z(policy.alpha_window, 2 * mech.domain_size)
    c_f, c_s, b, _ = _constants(mech)
    removed = np.zeros(mech.stats_size)
    keys: list[int] = []
    total = 0.0
    for _ in range(2 * mech.domain_size):
        left = np.asarray(stats, dtype=np.float64) - removed
        count = n - total
        est = mech.estimate(left)
        f, s = np.asarray(est.value)
        var_f, var_s, cov = mech.plugin_covariance(f, s)
        candidates = []
        for sigma, var in ((1.0, var_s + var_f - 2 * cov), (-1.0, var_s + var_f + 2 * cov)):
            sd = np.sqrt(np.maximum(var, 1e-300) / count)
            gap = sigma * s - f
            over = np.flatnonzero(gap > z * sd)
            if len(over):  # the largest disagreement first (in frequency units: the fakes' own key)
                k = int(over[np.argmax(gap[over])])
                candidates.append((float(gap[k]), k, sigma, float(z * sd[k])))
        if not candidates:
            break
        gap, k, sigma, delta = max(candidates)
        denominator = delta + (1 - b) / c_f - 1 / c_s
        x = count * (delta - gap) / denominator if denominator < 0 else 0.0
        # nor below the least frequency an honest window shows, -z sd (f >= 0): setting aside reports that name k
        # brings f_hat there after (F - c_f low n) / ((1 - b) - c_f low) of them
        low = -z * math.sqrt(max(float(var_f[k]), 0.0) / count)
        x = min(x, float(carriers(mech, left, count, np.array([k]), np.array([sigma]))[0]),
                max(0.0, (float(left[k]) - c_f * low * count) / ((1 - b) - c_f * low)))
        x = float(math.ceil(min(max(x, 0.0), MAX_SET_ASIDE * n - total)))
        keys.append(k)
        if x <= 0:  # no number of fake reports of this key explains it: suspected, nothing to set aside
            break
        removed += _removal(mech, np.array([k]), np.array([x]), np.array([sigma]))
        total += x
    if not keys:
        return clean(DISAGREEMENT, n, policy.alpha_window, math.inf)
    return Finding(DISAGREEMENT, SUSPECTED, n, total, removed, tuple(sorted(set(keys))), policy.alpha_window, 0.0,
                   f"{len(set(keys))} key(s) whose value reports exceed what their key reports allow")


def key_frequency_bound(mech: KeyValueMechanism, stats: np.ndarray, reference: Estimate | None,
                        policy: Policy = Policy(), held: np.ndarray | None = None, rounds: int = 8) -> Finding:
    """Keys whose frequency rose above their reference's bound, brought back to their reference frequency (module
    docstring); in rounds, as a PCKV-GRR fake of one key lowers the others' support (which setting it aside
    restores). `held`: per key, the frequency the tests over windows hold it to from above, where they found it
    rising (NaN: not held), as `excess_claims`' `held`: its bound is then that level, or its reference frequency
    where that is nearer, and it is brought to it."""
    support, n = split_count(stats, mech.stats_size)
    if not isinstance(mech, PCKV):
        return _untested(KEY_FREQUENCY, mech, n)
    if n < policy.min_reports:
        return too_few(KEY_FREQUENCY, n, policy)
    if reference is None or reference.n < policy.min_reports or not np.isfinite(reference.value[0]).all():
        return Finding(KEY_FREQUENCY, UNTESTED, n, detail="no reference window to compare with")
    f_ref = np.clip(np.asarray(reference.value)[0], 0.0, 1.0)
    var = mech.frequency_variance(f_ref) + f_ref * (1.0 - f_ref)  # and the sampling of devices
    z = bonferroni_z(policy.alpha_window, mech.domain_size)
    c_f, _, b, _ = _constants(mech)
    ref_total = np.asarray(reference.value)[1]
    removed = np.zeros(mech.stats_size)
    suspects: set[int] = set()
    total = 0.0
    allowance = 0.0
    for _ in range(rounds):
        left = np.asarray(stats, dtype=np.float64) - removed
        count = n - total
        f, s = np.asarray(mech.estimate(left).value)
        spread = z * np.sqrt(var / count + var / reference.n)
        base = np.minimum(1.0, f_ref + policy.drift)
        bound = base + spread
        allowance = float(np.max(bound - f_ref))
        if held is not None:
            bound = np.where(np.isfinite(held), np.minimum(base, held), bound)
        over = np.flatnonzero(f > bound)
        if not len(over):
            break
        suspects.update(int(k) for k in over)
        level = np.minimum(bound, base)[over]  # the reference (a held key: its level), not the bound
        x = (left[over] - c_f * level * count) / ((1 - b) - c_f * level)
        # the side the key's value total moved to from the reference's (fake (k, sigma) reports move it by sigma /
        # c_s each; its mean, or its total at the reference's mean, moves with the fakes' frequency too)
        signs = np.where(s[over] >= ref_total[over], 1.0, -1.0)
        counts = np.floor(np.minimum(np.clip(x, 0.0, None), carriers(mech, left, count, over, signs)))
        room = MAX_SET_ASIDE * n - total
        if counts.sum() > room:
            counts = np.floor(counts * room / counts.sum())
        if counts.sum() <= 0:
            break
        removed += _removal(mech, over, counts, signs)
        total += float(counts.sum())
    del support
    if not suspects:
        return clean(KEY_FREQUENCY, n, policy.alpha_window, allowance)
    return Finding(KEY_FREQUENCY, SUSPECTED, n, total, removed, tuple(sorted(suspects)), policy.alpha_window,
                   allowance, f"{len(suspects)} key(s) above the largest frequency an honest window shows given the "
                              f"reference")

