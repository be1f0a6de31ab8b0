"""The exact composition of k adaptively chosen eps-DP (eps-LDP) releases at a small delta.

Kairouz, Oh and Viswanath, "The composition theorem for differential privacy" (ICML 2015, Theorem 3.3) show that
k-fold adaptive composition of eps-DP mechanisms is dominated by k-fold randomized response, whose privacy region is
therefore the composition's (no eps-DP mechanism composes worse, and randomized response attains it). Its hockey-
stick divergence is a binomial sum (Murtagh and Vadhan, "The complexity of computing the optimal composition of
differential privacy", TCC 2016, Lemma 3.1; KOV's Theorem 3.3 is its value at the lattice eps' = (k - 2i) eps):

    delta(eps') = sum_{l : (k - 2l) eps > eps'} C(k, l) (e^{(k-l) eps} - e^{eps' + l eps}) / (1 + e^eps)^k,

falling in eps' from delta(0) = TV to delta(k eps) = 0. `composed_epsilon` is the smallest eps' with
delta(eps') <= delta, found by bisection (sums in log space; each O(k)). It is never above k eps (basic composition)
and about sqrt(2 k ln(1/delta)) eps + k eps^2 / 2 for small eps (advanced composition's regime).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp

from ldpstream.mechanisms.base import LDPError, check_epsilon, least_epsilon

BISECTION_STEPS = 60


def composition_delta(epsilon: float, k: int, epsilon_total: float) -> float:
    """delta(eps') of k composed eps-DP releases at eps' = `epsilon_total` (module docstring)."""
    l = np.arange(k + 1, dtype=np.float64)  # noqa: E741  (the sum's own index)
    keep = (k - 2 * l) * epsilon > epsilon_total
    if not keep.any():
        return 0.0
    l = l[keep]  # noqa: E741
    high = (k - l) * epsilon
    terms = gammaln(k + 1) - gammaln(l + 1) - gammaln(k - l + 1) + high + np.log1p(
        -np.exp(epsilon_total + l * epsilon - high))
    return math.exp(float(logsumexp(terms)) - k * (epsilon + math.log1p(math.exp(-epsilon))))  # / (1 + e^eps)^k


def composed_epsilon(epsilon: float, k: int, delta: float) -> float:
    """The smallest eps' at which k adaptively composed eps-DP releases are (eps', delta)-DP (to 2^-60 of k eps).

    Examples
    --------
    >>> round(composed_epsilon(8.0, 10, 1e-5), 4)  # large eps: composition costs k eps
    80.0
    >>> round(composed_epsilon(0.1, 100, 1e-5), 2)  # small eps: far below k eps = 10
    4.31
    """
    eps = check_epsilon(epsilon)
    if k < 1 or not 0 <= delta < 1:
        raise LDPError(f"need k >= 1 and delta in [0, 1), got k = {k}, delta = {delta}")
    return least_epsilon(lambda e: composition_delta(eps, k, e), k * eps, delta, BISECTION_STEPS)
