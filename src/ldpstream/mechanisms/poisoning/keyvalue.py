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
oracle's excess claims (`ldpstream.mechanisms.poisoning.frequency`), brought back by setting aside
x = (F - c_f b_k n) / ((1 - b) - c_f b_k) reports of (k, sigma), sigma the side to which the key's mean moved.
"""

from __future__ import annotations

import math

import numpy as np

from ldpstream.mechanisms.base import Estimate
from ldpstream.mechanisms.frequency.base import split_count
from ldpstream.mechanisms.keyvalue.base import KeyValueMechanism
from ldpstream.mechanisms.keyvalue.pckv import PCKV, PCKVGRR
from ldpstream.mechanisms.poisoning.base import SUSPECTED, UNTESTED, Finding, Policy, bonferroni_z, clean, too_few

DISAGREEMENT = "keyvalue_disagreement"
KEY_FREQUENCY = "key_frequency"
MAX_SET_ASIDE = 0.5


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


def keyvalue_disagreement(mech: KeyValueMechanism, stats: np.ndarray, policy: Policy = Policy()) -> Finding:
    """Keys whose value reports say more than their key reports allow (|s| > f), brought back (module docstring)."""
    _, n = split_count(stats, mech.stats_size)
    if not isinstance(mech, PCKV):
        return _untested(DISAGREEMENT, mech, n)
    if n < policy.min_reports:
        return too_few(DISAGREEMENT, n, policy)
    est = mech.estimate(stats)
    f, s = np.asarray(est.value)
    var_f, var_s, cov = mech.plugin_covariance(f, s)
    z = bonferroni_z(policy.alpha_window, 2 * mech.domain_size)
    c_f, c_s, b, _ = _constants(mech)
    keys, counts, signs = [], [], []
    for sigma, sd in ((1.0, np.sqrt(np.maximum(var_s + var_f - 2 * cov, 0) / n)),
                      (-1.0, np.sqrt(np.maximum(var_s + var_f + 2 * cov, 0) / n))):
        gap = sigma * s - f
        delta = z * sd
        for k in np.flatnonzero(gap > delta):
            denominator = delta[k] + (1 - b) / c_f - 1 / c_s
            x = n * (delta[k] - gap[k]) / denominator if denominator < 0 else 0.0
            keys.append(int(k))
            counts.append(float(math.ceil(min(max(x, 0.0), MAX_SET_ASIDE * n))))
            signs.append(sigma)
    if not keys:
        return clean(DISAGREEMENT, n, policy.alpha_window, math.inf)
    total = sum(counts)
    if total > MAX_SET_ASIDE * n:  # several keys: keep the total within the cap, in proportion
        counts = [math.floor(c * MAX_SET_ASIDE * n / total) for c in counts]
    removed = _removal(mech, np.array(keys), np.array(counts), np.array(signs))
    return Finding(DISAGREEMENT, SUSPECTED, n, float(sum(counts)), removed, tuple(sorted(set(keys))),
                   policy.alpha_window, 0.0, f"{len(keys)} key(s) whose value reports exceed what their key reports "
                                             f"allow")


def key_frequency_bound(mech: KeyValueMechanism, stats: np.ndarray, reference: Estimate | None,
                        policy: Policy = Policy()) -> Finding:
    """Keys whose frequency rose above their reference's bound, brought back to it (module docstring)."""
    support, n = split_count(stats, mech.stats_size)
    if not isinstance(mech, PCKV):
        return _untested(KEY_FREQUENCY, mech, n)
    if n < policy.min_reports:
        return too_few(KEY_FREQUENCY, n, policy)
    if reference is None or reference.n < policy.min_reports or not np.isfinite(reference.value[0]).all():
        return Finding(KEY_FREQUENCY, UNTESTED, n, detail="no reference window to compare with")
    est = mech.estimate(stats)
    f, s = np.asarray(est.value)
    f_ref = np.clip(np.asarray(reference.value)[0], 0.0, 1.0)
    var = mech.frequency_variance(f_ref)
    z = bonferroni_z(policy.alpha_window, mech.domain_size)
    spread = z * np.sqrt(var / n + var / reference.n)
    bound = np.minimum(1.0, f_ref + policy.drift) + spread
    suspects = np.flatnonzero(f > bound)
    allowance = float(np.max(bound - f_ref))
    if not len(suspects):
        return clean(KEY_FREQUENCY, n, policy.alpha_window, allowance)
    c_f, _, b, _ = _constants(mech)
    big_f = support[suspects]
    x = (big_f - c_f * bound[suspects] * n) / ((1 - b) - c_f * bound[suspects])
    counts = np.ceil(np.clip(x, 0.0, MAX_SET_ASIDE * n / len(suspects)))
    ref_total = np.asarray(reference.value)[1][suspects]
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = np.where(f[suspects] > 0, s[suspects] / f[suspects], 0.0) - np.where(
            f_ref[suspects] > 0, ref_total / np.maximum(f_ref[suspects], 1e-12), 0.0)
    signs = np.where(moved >= 0, 1.0, -1.0)
    removed = _removal(mech, suspects, counts, signs)
    return Finding(KEY_FREQUENCY, SUSPECTED, n, float(counts.sum()), removed, tuple(int(k) for k in suspects),
                   policy.alpha_window, allowance, f"{len(suspects)} key(s) above the largest frequency an honest "
                                                   f"window shows given the reference")
