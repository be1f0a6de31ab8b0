"""Post-processing of unbiased LDP estimates: clip a mean into its range, make a frequency vector consistent.

Post-processing costs no privacy (it only touches the aggregate), but it is *biased*: clipping moves a mean
toward the range, and forcing non-negative frequencies that sum to 1 raises the small ones and lowers the large
ones. So the raw unbiased estimate, with its standard errors, always stays available next to the post-processed
one (`ConsistentFrequencies.raw`); confidence intervals belong to the raw estimate (`Estimate.confidence_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ldpstream.mechanisms.base import Estimate, LDPError


def clip_mean(value: np.ndarray | float, lo: float, hi: float) -> np.ndarray:
    """The estimated mean(s) clipped into [lo, hi] (biased toward the inside of the range)."""
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise LDPError(f"need finite lo < hi, got [{lo}, {hi}]")
    return np.clip(np.asarray(value, dtype=np.float64), lo, hi)


def _check_frequencies(freqs: np.ndarray | list[float]) -> np.ndarray:
    f = np.asarray(freqs, dtype=np.float64)
    if f.ndim == 0 or f.shape[-1] == 0:
        raise LDPError(f"need a non-empty frequency vector, got shape {f.shape}")
    if not np.isfinite(f).all():
        raise LDPError("frequencies must be finite")
    return f


def project_simplex(freqs: np.ndarray | list[float]) -> np.ndarray:
    """The least-squares projection onto the probability simplex, along the last axis.

    argmin_z ||z - f||_2 subject to z >= 0 and sum(z) = 1 is z = max(f - theta, 0), theta found from the sorted
    values (Held et al. 1974; Duchi et al. ICML 2008, Fig. 1).
    """
    f = _check_frequencies(freqs)
    k = f.shape[-1]
    desc = -np.sort(-f, axis=-1)
    cumulative = np.cumsum(desc, axis=-1) - 1.0
    ranks = np.arange(1, k + 1)
    # rho = the largest j with desc_j - (cumsum_j - 1) / j > 0; it is always >= 1.
    rho = np.count_nonzero(desc - cumulative / ranks > 0, axis=-1, keepdims=True)
    theta = np.take_along_axis(cumulative, rho - 1, axis=-1) / rho
    return np.maximum(f - theta, 0.0)


def norm_sub(freqs: np.ndarray | list[float]) -> np.ndarray:
    """Norm-Sub (Wang, Lopuhaä-Zwakenberg et al., "Locally differentially private frequency estimation with
    consistency", NDSS 2020), along the last axis.

    Negative estimates become 0, then one amount delta is subtracted from the positive ones so that they sum to 1,
    repeating until none is negative. If the positive part sums to >= 1 the fixed point is max(f - delta, 0) with
    delta >= 0, i.e. the simplex projection of max(f, 0); otherwise delta < 0 is added to the positive entries only
    (the zeros stay zero). With no positive entry at all the result is uniform.
    """
    f = _check_frequencies(freqs)
    positive = np.maximum(f, 0.0)
    mass = positive.sum(axis=-1, keepdims=True)
    support = np.count_nonzero(positive, axis=-1, keepdims=True)
    topped_up = np.where(positive > 0, positive + (1.0 - mass) / np.maximum(support, 1), 0.0)
    uniform = np.full_like(f, 1.0 / f.shape[-1])
    return np.where(mass >= 1.0, project_simplex(positive), np.where(support > 0, topped_up, uniform))


@dataclass(frozen=True)
class ConsistentFrequencies:
    """A consistent (non-negative, summing to 1) and biased frequency vector next to the raw unbiased estimate."""

    raw: Estimate
    value: np.ndarray
    method: str


def make_consistent(estimate: Estimate, method: Literal["norm_sub", "project"] = "norm_sub") -> ConsistentFrequencies:
    """Post-process a frequency estimate with Norm-Sub or the simplex projection, keeping the raw one.

    Examples
    --------
    >>> import numpy as np
    >>> raw = Estimate(n=100, value=np.array([0.7, 0.5, -0.2]), stderr=np.full(3, 0.1))
    >>> out = make_consistent(raw)
    >>> out.value.tolist(), out.raw.value.tolist()
    ([0.6, 0.4, 0.0], [0.7, 0.5, -0.2])
    """
    methods = {"norm_sub": norm_sub, "project": project_simplex}
    if method not in methods:
        raise LDPError(f"unknown post-processing {method!r}; known: {sorted(methods)}")
    if estimate.n == 0:
        raise LDPError("no reports: nothing to make consistent")
    return ConsistentFrequencies(raw=estimate, value=methods[method](estimate.value), method=method)
