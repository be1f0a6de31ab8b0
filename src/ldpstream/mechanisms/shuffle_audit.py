"""An empirical lower bound on the central epsilon of a shuffled batch, beside the accountant's claim.

Neighbouring batches of n reports of GRR over k values (`ldpstream.mechanisms.frequency.grr`): every other device
holds value 1 (so it reports 0 with probability q), and the device that differs holds 0 in batch A and 1 in batch B.
The analyst sees the shuffled batch, a histogram; its count of 0s is a post-processing of it, so a test on that
count alone lower-bounds what the whole batch reveals:

    count_0 | A  ~  Bernoulli(p) + Binomial(n - 1, q),        count_0 | B  ~  Bernoulli(q) + Binomial(n - 1, q),

with p = e^eps0 / (e^eps0 + k - 1) and q = 1 / (e^eps0 + k - 1). Batches are drawn exactly from these laws (no
shortcut: a sum of n independent reports has exactly this law). The event {count_0 >= t} with the threshold t chosen
on selection samples is then measured on fresh ones, and (epsilon, delta)-DP requires
P[E | A] <= e^epsilon P[E | B] + delta, so epsilon >= ln((P_A - delta) / P_B), with one-sided Clopper-Pearson
bounds on P_A (below) and P_B (above) at the confidence given (`ldpstream.mechanisms.audit`). `exact_epsilon` is
the same test's pair evaluated exactly (the hockey-stick divergence of the two laws of count_0 at delta): what a
distinguisher that sees only the count achieves with unlimited samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon
from ldpstream.mechanisms.shuffle import shuffle_bounds


@dataclass(frozen=True)
class ShuffleAudit:
    """The claim (one batch, and a device's `windows` batches composed) and the measured lower bound."""

    epsilon0: float
    domain: int
    reports: int
    delta: float
    windows: int
    claimed_epsilon: float  # one batch, the accountant's tightest bound
    claimed_bound: str
    composed_epsilon: float  # a device's `windows` batches together, at the same total delta
    composed_bound: str
    epsilon_lower_bound: float  # measured, at `confidence`
    exact_epsilon: float  # the count test's pair, exactly
    threshold: int
    counts: tuple[int, int]
    samples: int
    confidence: float

    @property
    def within(self) -> bool:
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "within_claim": self.within}


def _count_laws(p: float, q: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact laws of count_0 under A and B over 0..n (module docstring)."""
    from scipy.stats import binom

    others = binom.pmf(np.arange(n), n - 1, q)
    shifted = np.concatenate([[0.0], others])
    base = np.concatenate([others, [0.0]])
    return p * shifted + (1 - p) * base, q * shifted + (1 - q) * base


def pair_epsilon(law_a: np.ndarray, law_b: np.ndarray, delta: float) -> float:
    """The least epsilon with sum max(0, A - e^epsilon B) <= delta (bisection on the hockey-stick divergence)."""
    def divergence(eps: float) -> float:
        return float(np.maximum(law_a - math.exp(eps) * law_b, 0).sum())

    if divergence(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while divergence(hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if divergence(mid) <= delta else (mid, hi)
    return hi


def audit_shuffle(epsilon0: float, domain: int, reports: int, delta: float, windows: int = 1,
                  samples: int = 2_000_000, seed: int = 0, confidence: float = 0.999) -> ShuffleAudit:
    """The accountant's claims for batches of `reports` GRR reports over `domain` values and a lower bound measured
    on `samples` neighbouring batches of each kind (module docstring)."""
    from ldpstream.mechanisms.audit import clopper_pearson

    eps = check_epsilon(epsilon0)
    if domain < 2 or reports < 2 or samples < 1000 or not 0 < delta < 1 or not 0 < confidence < 1:
        raise LDPError("the shuffle audit needs domain >= 2, reports >= 2, samples >= 1000, delta and confidence "
                       "in (0, 1)")
    one = shuffle_bounds(eps, reports, delta, "grr", domain)
    composed = one if windows == 1 else shuffle_bounds(eps, reports, delta, "grr", domain, windows)
    p = math.exp(eps) / (math.exp(eps) + domain - 1)
    q = 1 / (math.exp(eps) + domain - 1)
    rng = np.random.default_rng(seed)

    def batches(first: float, m: int) -> np.ndarray:
        return rng.binomial(1, first, m) + rng.binomial(reports - 1, q, m)

    select = max(1000, samples // 5)
    a, b = batches(p, select), batches(q, select)
    level = 1 - (1 - confidence) / 2
    best, threshold = -math.inf, int(np.median(a))
    for t in np.unique(np.quantile(a, np.linspace(0.5, 0.9999, 60)).astype(int)).tolist():
        p_a, p_b = clopper_pearson(int((a >= t).sum()), select, level)[0], clopper_pearson(
            int((b >= t).sum()), select, level)[1]
        score = math.log(max(p_a - delta, 1e-300) / p_b)
        if score > best:
            best, threshold = score, t
    a, b = batches(p, samples), batches(q, samples)
    count_a, count_b = int((a >= threshold).sum()), int((b >= threshold).sum())
    p_a, p_b = clopper_pearson(count_a, samples, level)[0], clopper_pearson(count_b, samples, level)[1]
    lower = max(0.0, math.log(p_a - delta) - math.log(p_b)) if p_a > delta else 0.0
    law_a, law_b = _count_laws(p, q, reports)
    return ShuffleAudit(eps, domain, reports, delta, windows, one["epsilon"], one["bound"], composed["epsilon"],
                        composed["bound"], lower, pair_epsilon(law_a, law_b, delta), int(threshold),
                        (count_a, count_b), samples, confidence)
