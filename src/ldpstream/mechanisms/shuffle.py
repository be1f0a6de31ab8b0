"""Privacy amplification by shuffling: the central (epsilon, delta) of a window of n shuffled eps0-LDP reports, and
of a device's windows composed.

A shuffler that strips who sent what and permutes a window's n reports shows the analyst a multiset. The bounds here
all rest on one reduction (Feldman, McMillan, Talwar, "Hiding among the clones", FOCS 2021, Sec. 3; the variation-
ratio view of Wang et al., "Privacy amplification via shuffling: unified, simplified, and tightened", VLDB 2024),
written out and checked here because every number depends on it:

Neighbouring windows differ in user 1's input, x^0 or x^1; R_b = R(x^b). With p = e^eps0 (R_0 <= p R_1 and back),
beta = TV(R_0, R_1), D+ = (R_0 - R_1)+, D- = (R_1 - R_0)+, U = D+/beta, V = D-/beta, q = p/(p+1) and
s = beta (p+1)/(p-1), each R_b is a mixture R_b = (1-s) M + s T_b with T_0 = q U + (1-q) V and T_1 = (1-q) U + q V:
solving gives (1-s) M = min(R_0, R_1) - |R_0 - R_1|/(p-1), which is >= 0 exactly because of the ratio bound. So user
1 emits a "token" (a sample of U or V) with probability s, of U with probability q under x^0 and 1-q under x^1, and
otherwise a sample of M that does not depend on its input. Every other user i writes
R(x_i) = (gamma/2) U + (gamma/2) V + (1-gamma) L_i, a "clone" of a U or V token with probability gamma/2 each, which
needs R(x_i) >= gamma |R_0 - R_1| / (2 beta), i.e. gamma = min_y 2 beta R(x_i)[y] / |R_0 - R_1|[y]. The multiset is
then a post-processing of (whether user 1 emitted a token, the number of U tokens, the number of V tokens), and
with C ~ Bin(n-1, gamma) clones, A ~ Bin(C, 1/2) of them U, Delta ~ Bern(q), the two windows are dominated by
P = (A + Delta, C - A + 1 - Delta) and Q = (A + 1 - Delta, C - A + Delta) with probability s (and identical
otherwise), so delta(eps) <= s * D_{e^eps}(P || Q), a hockey-stick divergence computed here exactly
(`delta_for`). P and Q mirror each other, so the divergence is the same both ways.

- The general eps0-LDP randomizer: gamma = e^-eps0 and s = 1 (FMT21, Thm 3.2: R(x_i) >= (R_0 + R_1)/(2p)). (The
  variation view alone gives gamma >= 2 beta/(p-1) for an unknown beta; its worst case, a tiny beta whose token
  hides among no clones, is no better than eps0, so it adds nothing for a randomizer not derived here.)
- A known mechanism: its own beta and gamma, derived per mechanism in `mechanism_reduction` (and checked in
  tests/mechanisms/test_shuffle.py against its channel enumerated on small domains).
- FMT21's closed form (their Thm 3.1 in the precise form their reference implementation evaluates; valid for
  eps0 <= log(n / (16 log(4/delta)))).

Not used: FMT's 2022 "stronger clone" bound for arbitrary randomizers (clone probability 2/(e^eps0 + 1) whatever
the randomizer): its erratum withdraws it for randomizers other than those it was proved for; here a mechanism gets a
clone probability above e^-eps0 only from its own channel, or from the worst case over beta above.

Composition over a device's windows (`composed_bounds`): basic (W eps at delta/W), advanced (Dwork, Rothblum,
Vadhan 2010), and privacy-loss distributions (Google's dp-accounting, composed W times) of the dominating pair,
discretised pessimistically. Sybils shrink the crowd a report hides in: `sybil_fraction` of n is assumed to be the
adversary's and left out of n.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.mechanisms.base import LDPError, check_epsilon, least_epsilon

TAIL = 1e-18  # binomial mass left out of a sum, added to delta whole (pessimistic)
BISECTION_STEPS = 40  # eps to 2^-40 of eps0


@dataclass(frozen=True)
class Reduction:
    """The dominating pair of a window (module docstring): user 1 emits a token with probability `emit`, each other
    user is a clone with probability `clone`, tokens are told apart at ratio e^epsilon0."""

    epsilon0: float
    emit: float
    clone: float

    def __post_init__(self) -> None:
        if not (0 < self.emit <= 1 + 1e-12 and 0 < self.clone <= 1 + 1e-12):
            raise LDPError(f"emit and clone probabilities must lie in (0, 1], got {self.emit}, {self.clone}")


def fmt21_reduction(epsilon0: float) -> Reduction:
    """The reduction for any eps0-LDP randomizer of FMT21 (clone probability e^-eps0)."""
    eps0 = check_epsilon(epsilon0)
    return Reduction(eps0, 1.0, math.exp(-eps0))


def variation_reduction(epsilon0: float, beta: float, clone: float) -> Reduction:
    """The reduction of a randomizer with ratio bound e^eps0, total variation `beta` between its outputs for two
    inputs, and clone probability `clone` (module docstring)."""
    p = math.exp(check_epsilon(epsilon0))
    return Reduction(epsilon0, min(1.0, beta * (p + 1) / (p - 1)), clone)


def mechanism_reduction(name: str, epsilon: float, domain: int | None = None) -> Reduction | None:
    """The reduction of a known mechanism from its own channel, None for one without a derivation here (the general
    bounds apply). Derivations (e = e^eps; beta, then gamma = min 2 beta R(x_i)/|R_0 - R_1|):

    - grr over k values: beta = (e-1)/(e+k-1); at y = x^0, R(x_i) >= 1/(e+k-1): gamma = 2/(e+k-1).
    - sue, oue (bits Bern(p) at the value, Bern(q) elsewhere): R_0, R_1 differ in two bits, beta = p - q; the least
      R(x_i) relative to |R_0 - R_1| is q (1-p)/(p-q) (a third bit at x_i reads 0): gamma = 2 q (1 - p).
    - olh, blh (a hash into g buckets, then grr over g; collision probability c): beta = (1-c)(p_g - q_g),
      gamma = 2 (1-c) q_g.
    - hadamard (a uniform row, then randomized response on one bit): the rows tell x^0 and x^1 apart half the time,
      beta = (2p-1)/2 with p = e/(e+1), gamma = 1 - p.
    - duchi, harmony (one bit, randomized response at the extremes): beta = (e-1)/(e+1), gamma = 2/(e+1).
    - pm (density e^(eps/2) times higher on [l(t), l(t) + C - 1], C = (e^(eps/2)+1)/(e^(eps/2)-1)): the two extreme
      inputs' high parts are disjoint, beta = (h - l)(C - 1), gamma = 2 l (C - 1) with h, l the two densities.
    - laplace (scale 2/eps on [-1, 1]): beta = 1 - e^(-eps/2), gamma = 2 beta/(e - 1) (the tails' ratio).
    """
    eps = check_epsilon(epsilon)
    e = math.exp(eps)
    if name == "grr":
        if domain is None or domain < 2:
            raise LDPError("grr needs its domain size k >= 2")
        return variation_reduction(eps, (e - 1) / (e + domain - 1), 2 / (e + domain - 1))
    if name in ("sue", "oue"):
        from ldpstream.mechanisms.frequency.unary import OUE, SUE

        oracle = (SUE if name == "sue" else OUE)(eps, max(domain or 3, 3))
        p, q = oracle.p, oracle.q
        return variation_reduction(eps, p - q, 2 * q * (1 - p))
    if name in ("olh", "blh"):
        from ldpstream.mechanisms.frequency.local_hash import BLH, OLH, collision_probability

        hashed = (OLH if name == "olh" else BLH)(eps, max(domain or 3, 3))
        g = hashed.buckets()
        c = float(collision_probability(g))
        p_g, q_g = e / (e + g - 1), 1 / (e + g - 1)
        return variation_reduction(eps, (1 - c) * (p_g - q_g), 2 * (1 - c) * q_g)
    if name == "hadamard":
        p = e / (e + 1)
        return variation_reduction(eps, (2 * p - 1) / 2, 1 - p)
    if name in ("duchi", "harmony"):
        return variation_reduction(eps, (e - 1) / (e + 1), 2 / (e + 1))
    if name == "pm":
        half = math.exp(eps / 2)
        c = (half + 1) / (half - 1)
        high = (e - half) / (2 * half + 2)  # the centre density p = (e - e^(eps/2)) / (2 e^(eps/2) + 2) (000 Alg. 2)
        low = high / e
        return variation_reduction(eps, (high - low) * (c - 1), 2 * low * (c - 1))
    if name == "laplace":
        beta = 1 - math.exp(-eps / 2)
        return variation_reduction(eps, beta, 2 * beta / (e - 1))
    return None


@functools.lru_cache(maxsize=64)
def _binomial(n: int, p: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The values of Bin(n, p) within about 9 standard deviations of its mean (and more below, where scipy's quantile
    puts the lower TAIL), their probabilities, and the exact mass of both tails left out."""
    from scipy.stats import binom

    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    lo = max(0, min(int(binom.ppf(TAIL, n, p)), int(mean - 9 * sd)) - 1)
    hi = min(n, int(math.ceil(mean + max(mean - lo, 9 * sd) + 10)))
    values = np.arange(lo, hi + 1)
    left_out = float(binom.cdf(lo - 1, n, p) + binom.sf(hi, n, p))
    return values, binom.pmf(values, n, p), left_out


def delta_for(reduction: Reduction, n: int, epsilon: float) -> float:
    """delta(eps) of a window of n shuffled reports: s D_{e^eps}(P || Q) (module docstring), exactly: given C = c,
    P_c / Q_c grows with a' = A + Delta, so the divergence is a difference of binomial tails from a threshold."""
    from scipy.stats import binom

    if n < 1:
        raise LDPError(f"a window holds at least one report, got n = {n}")
    p0 = math.exp(reduction.epsilon0)
    if epsilon >= reduction.epsilon0:
        return 0.0
    q = p0 / (p0 + 1)
    e = math.exp(epsilon)
    rho = (e * q - (1 - q)) / (q - e * (1 - q))  # P_c(a') > e^eps Q_c(a')  iff  a'/(c - a' + 1) > rho
    if n == 1:
        c, mass, rest = np.array([0]), np.array([1.0]), 0.0
    else:
        c, mass, rest = _binomial(n - 1, min(reduction.clone, 1.0))
    t = np.floor(rho * (c + 1) / (1 + rho)) + 1  # the first a' where P_c exceeds e^eps Q_c
    above = binom.sf(t - 2, c, 0.5)  # P(A >= t - 1)
    above_t = binom.sf(t - 1, c, 0.5)  # P(A >= t)
    h = q * above + (1 - q) * above_t - e * ((1 - q) * above + q * above_t)
    return float(min(1.0, reduction.emit * (float(np.dot(mass, np.clip(h, 0.0, None))) + rest)))


def epsilon_for(reduction: Reduction, n: int, delta: float) -> float:
    """The least eps (to 2^-40 of eps0, rounded up) with delta_for(eps) <= delta."""
    if not 0 < delta < 1:
        raise LDPError(f"delta must lie in (0, 1), got {delta}")
    return least_epsilon(lambda e: delta_for(reduction, n, e), reduction.epsilon0, delta, BISECTION_STEPS)


def fmt21_closed_form(epsilon0: float, n: int, delta: float) -> float | None:
    """FMT21's closed form (Thm 3.1, as its reference implementation evaluates it), None outside its range
    eps0 <= log(n / (16 log(4/delta))); at most eps0 (the batch of eps0-LDP reports is eps0-DP whatever the
    shuffle: at small eps0 and n the formula exceeds it, e.g. 0.367 at eps0 = 0.3125, n = 232, delta = 1e-4)."""
    eps0 = check_epsilon(epsilon0)
    if n < 2 or eps0 > math.log(n / (16 * math.log(4 / delta))):
        return None
    a = 8 * math.sqrt(math.exp(eps0) * math.log(4 / delta)) / math.sqrt(n)
    c = 8 * math.exp(eps0) / n
    first = math.log(1 + a + c)
    return min(eps0, math.log(1 + (1 - math.exp(-eps0)) / (1 + math.exp(-eps0 - first)) * (a + c)))


def window_bounds(epsilon0: float, n: int, delta: float, mechanism: str | None = None,
                  domain: int | None = None) -> dict[str, float]:
    """Every bound on one window's central epsilon at `delta`, by name (a bound that does not apply is left out)."""
    bounds = {"fmt21_numerical": epsilon_for(fmt21_reduction(epsilon0), n, delta)}
    closed = fmt21_closed_form(epsilon0, n, delta)
    if closed is not None:
        bounds["fmt21_closed_form"] = closed
    own = None if mechanism is None else mechanism_reduction(mechanism, epsilon0, domain)
    if own is not None:
        bounds[f"variation_ratio_{mechanism}"] = epsilon_for(own, n, delta)
    return bounds


def central_epsilon(epsilon0: float, n: int, delta: float, mechanism: str | None = None,
                    domain: int | None = None) -> tuple[float, float, str]:
    """(epsilon, delta, bound) of a batch of n shuffled eps0-LDP reports: the tightest of `window_bounds` at `delta`,
    or (eps0, 0, "local") when none is below eps0 (the local guarantee needs no delta). Without a `mechanism` the
    bounds are those of any eps0-LDP randomizer (FMT21 Thm 3.2; its closed form Thm 3.1), vectors included."""
    bounds = window_bounds(epsilon0, n, delta, mechanism, domain)
    bound = min(bounds, key=lambda k: bounds[k])
    if bounds[bound] >= epsilon0:
        return epsilon0, 0.0, "local"
    return bounds[bound], delta, bound


def window_pld(reduction: Reduction, n: int, discretization: float = 1e-4) -> Any:
    """The privacy-loss distribution (dp-accounting) of a window's dominating pair, pessimistically discretised.

    Clone counts are taken in blocks whose pair is that of the block's fewest clones (more clones are a post-
    processing of fewer: the pair of c dominates that of c + 1), and each block's losses exactly over A within
    +-9 standard deviations; what is left out is infinite loss."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
    from scipy.stats import binom

    p0 = math.exp(reduction.epsilon0)
    q = p0 / (p0 + 1)
    if n == 1:
        c_values, c_mass, left_out = np.array([0]), np.array([1.0]), 0.0
    else:
        c_values, c_mass, left_out = _binomial(n - 1, min(reduction.clone, 1.0))
    edges = np.unique(np.round(np.linspace(0, len(c_values), min(len(c_values), 400) + 1)).astype(int))
    indices, masses = [], []
    for start, stop in zip(edges[:-1], edges[1:], strict=True):
        c = int(c_values[start])
        weight = float(c_mass[start:stop].sum())
        spread = 9 * math.sqrt(c) / 2 + 2
        a = np.arange(max(0, math.floor(c / 2 - spread)), min(c + 1, math.ceil(c / 2 + spread)) + 2)
        b_prev, b_here = binom.pmf(a - 1, c, 0.5), binom.pmf(a, c, 0.5)
        p_mass = q * b_prev + (1 - q) * b_here
        q_mass = (1 - q) * b_prev + q * b_here
        keep = p_mass > 0
        indices.append(np.ceil((np.log(p_mass[keep]) - np.log(q_mass[keep])) / discretization).astype(np.int64))
        masses.append(reduction.emit * weight * p_mass[keep])
        left_out += weight * max(0.0, 1.0 - float(p_mass[keep].sum()))
    index, inverse = np.unique(np.concatenate(indices), return_inverse=True)
    summed = np.bincount(inverse, weights=np.concatenate(masses))
    losses = dict(zip(index.tolist(), summed.tolist(), strict=True))
    losses[0] = losses.get(0, 0.0) + (1 - reduction.emit)
    pmf = pld_pmf.create_pmf(losses, discretization, reduction.emit * left_out, pessimistic_estimate=True)
    return PrivacyLossDistribution(pmf)


def composed_bounds(epsilon0: float, n: int, delta: float, windows: int, mechanism: str | None = None,
                    domain: int | None = None) -> dict[str, float]:
    """Bounds on the central epsilon of a device's `windows` windows together, at total `delta`, by name."""
    if windows < 1:
        raise LDPError(f"windows must be >= 1, got {windows}")
    reduction = (mechanism_reduction(mechanism, epsilon0, domain) if mechanism else None) or fmt21_reduction(
        epsilon0)
    one = min(window_bounds(epsilon0, n, delta / windows, mechanism, domain).values())
    half = min(window_bounds(epsilon0, n, delta / (2 * windows), mechanism, domain).values())
    advanced = math.sqrt(2 * windows * math.log(2 / delta)) * half + windows * half * math.expm1(half)
    pld = window_pld(reduction, n).self_compose(windows) if windows > 1 else window_pld(reduction, n)
    return {"basic": windows * one, "advanced": advanced, "pld": float(pld.get_epsilon_for_delta(delta))}


def shuffle_bounds(epsilon0: float, n: int, delta: float, mechanism: str | None = None, domain: int | None = None,
                   windows: int = 1, sybil_fraction: float = 0.0) -> dict[str, Any]:
    """Every bound on the central (epsilon, delta) of shuffled eps0-LDP reports, and `epsilon`, the tightest: of one
    window (`windows` 1) or of a device's windows composed. `sybil_fraction` of the reports is assumed fake."""
    if not 0 <= sybil_fraction < 1:
        raise LDPError(f"sybil_fraction must lie in [0, 1), got {sybil_fraction}")
    honest = int(math.floor(n * (1 - sybil_fraction)))
    if honest < 1:
        raise LDPError(f"no honest report left of n = {n}")
    bounds = (window_bounds(epsilon0, honest, delta, mechanism, domain) if windows == 1
              else composed_bounds(epsilon0, honest, delta, windows, mechanism, domain))
    name = min(bounds, key=lambda k: bounds[k])
    return {"epsilon0": epsilon0, "reports": n, "honest_reports": honest, "delta": delta, "windows": windows,
            "mechanism": mechanism, "domain": domain, "bounds": bounds, "epsilon": bounds[name], "bound": name}
