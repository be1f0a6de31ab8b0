"""Poisoning detectors for frequency oracles (004's pure protocols: GRR, SUE/OUE, BLH/OLH, Hadamard).

Two detectors, after Cao, Jia and Gong, "Data Poisoning Attacks to Local Differential Privacy Protocols" (USENIX
Security 2021; their Sec. 6 countermeasures: detecting fake users by frequent itemsets, detecting target items
against earlier frequencies), with the recovery of LDPRecover (Sun et al., ICDE 2024) in the form derived below.

**Excess claims** (`excess_claims`, on the additive statistics alone, so the live estimate carries it). An honest
window's unbiased estimate f_hat(v) is within z standard errors of its truth, and the truth is at most 1 and, for a
stationary population, the reference window's (the collection's previous window): so an item is suspected when

    f_hat(v) > min(1, f_ref(v) + drift) + z sqrt(se(v)^2 + se_ref(v)^2),    z = Phi^-1(1 - alpha_window / 2K),

with both standard errors at the reference's frequency (the null's) and counting the sampling of devices (two windows
are two samples of a population: `window_variance`), and *demoted* (fake reports that withhold their support push it
down) when f_hat(v) < max(0, f_ref(v) - drift) - z sqrt(...), the other tail; Bonferroni over the K items and both
tails: an honest window is flagged with probability <= alpha_window. A demoted item's missing supports are given
back up to its reference frequency (a negative removal): the reports that withheld them look like any honest report that
does not support v, so none is set aside for it. An item that expects fewer than NORMAL_COUNT supports is not tested
below (it cannot fall far enough to be told from noise); above, its normal tail is
too light, and its bound is also at least the exact Binomial quantile at the reference's upper confidence limit.
The bound b(v) is what an attacker who knows the detector can keep: a suspected item is brought back to its
reference frequency f_ref(v) (its level before; where a test over windows holds it, that level), so a detected
attacker keeps nothing of it, and the gain left is at most sum over targets of (b(v) - f_ref(v)), kept by staying
under every bound. Brought back only to b(v), as before this version, a detected attacker kept the most an
undetected one keeps: at eps = 1 with GRR over 1,024 items, 5% maximal-gain fakes on 10 absent targets were
defended at about 0.10 each, above every genuine item of Zipf(1) but the first. A demoted item is given back up
to its reference frequency likewise.

Recovery (derived here; LDPRecover's model of fake reports that support the targets and blend elsewhere). Setting
aside X reports, of which y(v) support a suspected item v, makes v's estimate ((c(v) - y(v)) / (s (n - X)) - q) /
(p - q); it equals its level l(v) (f_ref(v), or the held level) when y(v) = c(v) - s (n - X) pi(v),
pi(v) = q + (p - q) l(v). Reports of a single-support
oracle (GRR: Support(y) = {y}) support one item each, so X = sum y(v), which solves to

    X = (C_S - s n Pi_S) / (1 - s Pi_S),    C_S = sum_S c(v), Pi_S = sum_S pi(v);

a report of a set-support oracle (UE, local hashing) may support every suspected item, so the fewest reports that
carry the excess are X = max_v (c(v) - s n pi(v)) / (s (1 - pi(v))). Elsewhere those reports are taken to support
an item at the honest background rate q (what the maximal gain attacks do to pass a count of ones; 0 for GRR), so
an unsuspected item's estimate becomes f_hat(v) n / (n - X), the fakes' dilution undone. X is an estimate (the
least that explains the excess), at most half the window.

**Support itemsets** (`support_itemsets`, on the reports of a closed window: set-support oracles only). An honest
report supports each value independently given the device's own (UE: bit by bit; local hashing: through a
pairwise-independent hash), so two items are supported together by about q^2 + q (p - q)(f(u) + f(v)) of the
reports; fake reports that promote several targets at once support them together far more often. Among the
candidate items (the largest estimates, and those above their reference), the pairs whose co-support count exceeds
that by z_pairs binomial standard deviations (Bonferroni over the pairs) link suspected items; each connected group
whose items are linked to at least half of the others is a suspected set S. A report is set aside when it supports
at least t items of S, t the least such that any honest device, whatever its value, is flagged with probability
<= alpha_report:
- UE: worst case the device's value is in S: P[Bern(p) + Bin(|S| - 1, q) >= t] (exact);
- local hashing: P[flag | seed] <= p + (1 - p)(|B_t| - 1)/(g - 1) when some bucket holds >= t items of S under the
  seed (B_t: those buckets), else 0; its mean over seeds is estimated by Monte Carlo over the actual hash family
  with a 4-sigma margin (the family is only pairwise independent: structured sets, e.g. arithmetic progressions,
  collide far more often than 1/g, and this bound accounts for it where a binomial would not).
The set-aside reports' statistics are exact (the reports themselves), so the defended estimate is the oracle's
estimate over the reports kept; their genuine share moves an item's estimate by at most alpha_report / (p - q).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from scipy.stats import binom

from ldpstream.mechanisms.base import Estimate, Reports
from ldpstream.mechanisms.frequency.base import FrequencyOracle, split_count
from ldpstream.mechanisms.frequency.grr import GRR
from ldpstream.mechanisms.frequency.local_hash import HASH_PRIME, LocalHash, hash_buckets, supported
from ldpstream.mechanisms.frequency.unary import UnaryEncoding
from ldpstream.mechanisms.poisoning.base import (
    SUSPECTED,
    UNTESTED,
    Finding,
    Policy,
    bonferroni_z,
    clean,
    too_few,
    upper_mean,
)
from ldpstream.mechanisms.poisoning.sequential import DEMOTION_ITEMS, LONG_ALL_SHARE

EXCESS = "excess_claims"
ITEMSETS = "support_itemsets"
MAX_SET_ASIDE = 0.5  # a test on sums sets aside at most this fraction of a window
PAIR_SAMPLE = 50_000  # reports whose candidate co-supports are counted (evenly spaced over the window)
PAIR_MARGIN = 0.05  # a linked pair's co-support must also exceed the model's by this fraction (model error)
SEED_SAMPLES = 1 << 17  # seeds of the Monte Carlo bound of local hashing's report threshold
SEED_RNG = 0x5EED  # fixed: the same window gives the same threshold
MIN_SET = 2
NORMAL_COUNT = 30  # expected supports under the reference below which an item's bound is the exact binomial's


class Supports(Protocol):
    """What the tests over windows read of an oracle (`standardized_excess`, `block_shift`, `long_shift`): K, a
    report's s support indicators of each value, each 1 with probability q + (p - q) f, the estimate's n Var[f_hat]
    for fixed devices, and the estimate of a block's statistics. A frequency oracle is one; so are PCKV's key
    frequencies (`ldpstream.mechanisms.poisoning.keyvalue.KeyOracle`)."""

    @property
    def domain_size(self) -> int: ...

    @property
    def p(self) -> float: ...

    @property
    def q(self) -> float: ...

    @property
    def supports_per_report(self) -> int: ...

    def variance(self, frequencies: np.ndarray | float) -> np.ndarray: ...

    def estimate(self, stats: np.ndarray) -> Estimate: ...


def usable_reference(reference: Estimate | None, policy: Policy) -> bool:
    """Whether a reference can be compared with: finite estimates from at least the policy's minimum of reports."""
    return reference is not None and reference.n >= policy.min_reports and bool(np.isfinite(reference.value).all())


def window_variance(oracle: Supports, f: np.ndarray) -> np.ndarray:
    """n Var[f_hat(v)] of a window whose n devices are drawn from a population with frequencies f: the oracle's
    (fixed devices) plus the sampling of the devices, f (1 - f). Derived here: a report's support indicator of v is
    then Bernoulli(pi), pi = q + (p - q) f, and pi (1 - pi) / (p - q)^2 is exactly the sum."""
    return oracle.variance(f) + f * (1.0 - f)


def _spread(oracle: Supports, est: Estimate, reference: Estimate, policy: Policy
            ) -> tuple[np.ndarray, np.ndarray, float]:
    """(f_ref clipped to [0, 1], the standard deviation of an honest window's f_hat - f_ref, z two-sided over the
    K items at alpha_window)."""
    z = bonferroni_z(policy.alpha_window, 2 * oracle.domain_size)
    f0 = np.clip(reference.value, 0.0, 1.0)
    var = window_variance(oracle, f0)
    return f0, np.sqrt(var / est.n + var / reference.n), z


def item_bounds(oracle: Supports, est: Estimate, reference: Estimate | None,
                policy: Policy) -> tuple[np.ndarray, np.ndarray]:
    """(b(v), the reference frequency each bound rises from) per item (module docstring): the largest estimate an
    honest window shows with probability 1 - alpha_window / 2K; without a usable reference, 1 + z se."""
    if not usable_reference(reference, policy):
        z = bonferroni_z(policy.alpha_window, oracle.domain_size)
        f0 = np.clip(np.nan_to_num(est.value), 0.0, 1.0)
        se = np.sqrt(oracle.variance(f0) / est.n)
        return 1.0 + z * se, np.ones_like(f0)
    assert reference is not None
    f0, sd, z = _spread(oracle, est, reference, policy)
    var = window_variance(oracle, f0)
    base = np.minimum(1.0, f0 + policy.drift)
    bound = base + z * sd
    s, p, q = oracle.supports_per_report, oracle.p, oracle.q
    small = s * est.n * (q + (p - q) * f0) < NORMAL_COUNT
    if small.any():  # few expected supports: the normal approximation's tail is too light; the exact binomial's
        f_up = np.clip(base[small] + z * np.sqrt(var[small] / reference.n), 0.0, 1.0)
        limit = binom.isf(policy.alpha_window / (2 * oracle.domain_size), s * est.n, q + (p - q) * f_up)
        bound[small] = np.maximum(bound[small], (limit / (s * est.n) - q) / (p - q))
    return bound, f0


def lower_bounds(oracle: FrequencyOracle, est: Estimate, reference: Estimate, policy: Policy) -> np.ndarray:
    """The smallest estimate an honest window shows, per item, with probability 1 - alpha_window / 2K (the other
    tail of `item_bounds`); -inf where an item expects fewer than NORMAL_COUNT supports (not tested: too few to fall
    far enough to be told from noise)."""
    f0, sd, z = _spread(oracle, est, reference, policy)
    s, p, q = oracle.supports_per_report, oracle.p, oracle.q
    low = np.maximum(0.0, f0 - policy.drift) - z * sd
    return np.where(s * est.n * (q + (p - q) * f0) < NORMAL_COUNT, -np.inf, low)


def standardized_excess(oracle: Supports, est: Estimate, reference: Estimate, policy: Policy) -> np.ndarray:
    """Per item, (f_hat - f_ref) in standard deviations of an honest window's, clipped to the per-window test's
    +-z (what the per-window test leaves: `ldpstream.mechanisms.poisoning.sequential`)."""
    f0, sd, z = _spread(oracle, est, reference, policy)
    return np.clip((np.asarray(est.value) - f0) / sd, -z, z)


def block_shift(oracle: Supports, block: Estimate, lagged: Estimate, policy: Policy) -> np.ndarray:
    """Per item, +1 (-1) where the estimate of the latest windows together (`block`: this one and the few before)
    lies above (below) the estimate of the windows before them (`lagged`) by more than z standard deviations, else
    0 (`ldpstream.mechanisms.poisoning.sequential`, the block test). The same standardization as the window's test
    (`_spread`: both standard errors at the lagged windows' frequency, device sampling counted), so an honest
    block's step is N(0, 1) per item; z = Phi^-1(1 - (alpha_sequential / 2) / 2K): Bonferroni over the K items and
    both sides, with half the sequential budget (the CUSUM has the other half). Items that expect fewer than
    NORMAL_COUNT supports in the block are not tested (their normal tail is too light)."""
    f0, sd, _ = _spread(oracle, block, lagged, policy)
    z = bonferroni_z(policy.alpha_sequential / 2, 2 * oracle.domain_size)
    x = (np.asarray(block.value, dtype=np.float64) - f0) / sd
    s, p, q = oracle.supports_per_report, oracle.p, oracle.q
    tested = s * block.n * (q + (p - q) * f0) >= NORMAL_COUNT
    return np.where(tested & (np.abs(x) > z), np.sign(x), 0.0)


def long_shift(oracle: Supports, block: Estimate, lagged: Estimate, pooled: Estimate, policy: Policy,
               items: int = DEMOTION_ITEMS) -> np.ndarray:
    """Per item, +1 (-1) where the long block test finds it above (below) the lagged windows
    (`ldpstream.mechanisms.poisoning.sequential`), else 0; y = (f_block - f_lag) / sd, `_spread`'s sd, so N(0, 1) in
    an honest block. Two parts of the budget alpha_long: every item, two-sided, |y| > Phi^-1(1 - LONG_ALL_SHARE
    alpha_long / 2K); and the `items` largest of `pooled` (the block and the lagged windows together), down only,
    y < -Phi^-1(1 - (1 - LONG_ALL_SHARE) alpha_long / items). Items that expect fewer than NORMAL_COUNT supports in the
    block are not tested."""
    f0, sd, _ = _spread(oracle, block, lagged, policy)
    order = np.argsort(-np.nan_to_num(np.asarray(pooled.value, dtype=np.float64), nan=-np.inf), axis=-1,
                       kind="stable")
    rank = np.argsort(order, axis=-1, kind="stable")  # each item's place, 0 the largest (rows: several windows)
    s, p, q = oracle.supports_per_report, oracle.p, oracle.q
    tested = s * block.n * (q + (p - q) * f0) >= NORMAL_COUNT
    x = (np.asarray(block.value, dtype=np.float64) - f0) / sd
    every = tested & (np.abs(x) > bonferroni_z(LONG_ALL_SHARE * policy.alpha_long, 2 * oracle.domain_size))
    top = tested & (rank < items) & (x < -bonferroni_z((1 - LONG_ALL_SHARE) * policy.alpha_long, items))
    return np.where(every, np.sign(x), np.where(top, -1.0, 0.0))


def excess_claims(oracle: FrequencyOracle, stats: np.ndarray, reference: Estimate | None = None,
                  policy: Policy = Policy(), held: tuple[np.ndarray, np.ndarray] | None = None) -> Finding:
    """Items whose estimate exceeds what an honest window shows, each brought back to its reference frequency by
    setting aside the fewest reports that explain its rise over it, and items below the smallest (demoted), brought
    back up to their reference frequency (module docstring). `reference`: the oracle's estimate of the collection's
    previous windows (None: only the impossible, f > 1, is tested, and brought back to 1); `held`: per item, the
    level its sequential test holds it to from above (below), where it found it drifting (NaN: not held): its bound
    on that side is then that level, or its reference frequency where that is nearer, and it is brought to it."""
    counts, n = split_count(stats, oracle.stats_size)
    if n < policy.min_reports:
        return too_few(EXCESS, n, policy)
    est = oracle.estimate(stats)
    bound, base = item_bounds(oracle, est, reference, policy)
    usable = usable_reference(reference, policy)
    allowance = float(np.max(bound - base)) if usable else math.inf
    value = np.asarray(est.value)
    if usable:
        assert reference is not None
        low = lower_bounds(oracle, est, reference, policy)
        if held is not None:
            up, down = held
            bound = np.where(np.isfinite(up), np.minimum(base, up), bound)
            low = np.where(np.isfinite(down) & np.isfinite(low),
                           np.maximum(np.maximum(0.0, base - policy.drift), down), low)
        demoted = np.flatnonzero(value < low)
    else:
        low, demoted = np.full_like(bound, -np.inf), np.zeros(0, dtype=np.int64)
    suspects = np.flatnonzero(value > bound)
    if not len(suspects) and not len(demoted):
        return clean(EXCESS, n, policy.alpha_window, allowance)
    s, p, q = oracle.supports_per_report, oracle.p, oracle.q
    # a suspect goes back to its reference (a held one to its held level, at or under it), a demoted item up to its
    # reference (a held one to its held level, at or over it): brought only to its bound, a detected attacker kept
    # what an undetected one keeps, and its targets stayed above the genuine items in the defended top list
    level = np.minimum(bound, base)
    floor = np.maximum(low, np.maximum(0.0, base - policy.drift)) if usable else low
    pi = q + (p - q) * np.clip(level[suspects], 0.0, 1.0)
    c = counts[suspects]
    if not len(suspects):
        x, background = 0.0, 0.0
    elif isinstance(oracle, GRR):  # one report supports one item
        x = (c.sum() - s * n * pi.sum()) / (1.0 - s * pi.sum()) if s * pi.sum() < 1 else c.sum()
        background = 0.0
    else:
        x = float(np.max((c - s * n * pi) / (s * (1.0 - pi))))
        background = s * q
    x = float(math.ceil(np.clip(x, 0.0, MAX_SET_ASIDE * n)))  # whole reports: n stays a count
    removed = np.zeros(oracle.stats_size)
    removed[:-1] = np.minimum(counts, background * x)
    removed[suspects] = np.clip(c - s * (n - x) * pi, 0.0, np.minimum(c, s * x))
    # a demoted item's missing supports are given back (a negative removal) up to its floor: the reports that
    # withheld them cannot be told from honest ones, so none is set aside for it
    removed[demoted] = np.minimum(0.0, counts[demoted] - s * (n - x) * (q + (p - q) * floor[demoted]))
    removed[-1] = x
    what = [f"{len(suspects)} item(s) above the largest estimate an honest window shows"
            f"{', brought back to the reference' if usable else ' (f > 1)'}"] if len(suspects) else []
    if len(demoted):
        what.append(f"{len(demoted)} item(s) below the smallest (demoted), given back up to the reference")
    return Finding(EXCESS, SUSPECTED, n, x, removed, tuple(sorted(int(v) for v in (*suspects, *demoted))),
                   policy.alpha_window, allowance, "; ".join(what))


# --- support itemsets ---------------------------------------------------------------------------------------------
def candidate_items(est: Estimate, reference: Estimate | None, count: int) -> np.ndarray:
    """The items examined for itemsets: the `count` largest estimates and the `count` that rose most above their
    reference (in standard errors), sorted."""
    value = np.nan_to_num(np.asarray(est.value, dtype=np.float64), nan=-np.inf)
    picks = [np.argsort(-value, kind="stable")[:count]]
    if reference is not None and np.isfinite(reference.value).all() and reference.n > 0:
        rise = (value - reference.value) / np.sqrt(np.asarray(est.stderr) ** 2 + np.asarray(reference.stderr) ** 2)
        picks.append(np.argsort(-np.nan_to_num(rise, nan=-np.inf), kind="stable")[:count])
    return np.unique(np.concatenate(picks))


def candidate_supports(oracle: FrequencyOracle, reports: Reports, items: np.ndarray) -> np.ndarray:
    """(n, len(items)) bool: which of the items each report supports (only those columns are computed)."""
    items = np.asarray(items, dtype=np.int64)
    if isinstance(oracle, UnaryEncoding):
        return np.asarray(reports["bits"])[:, items].astype(bool)
    if isinstance(oracle, LocalHash):
        a, b, y = (np.asarray(reports[k], dtype=np.int64) for k in ("a", "b", "y"))
        return supported(a, b, y, items, oracle.g)
    return np.asarray(oracle.support_matrix(reports))[:, items].astype(bool)


def pair_sample(n: int) -> np.ndarray:
    """The rows whose candidate co-supports are counted: at most PAIR_SAMPLE, evenly spaced (no randomness: the same
    window gives the same sets)."""
    return np.arange(0, n, max(1, -(-n // PAIR_SAMPLE)))


def linked_sets(oracle: FrequencyOracle, supports: np.ndarray, policy: Policy) -> list[np.ndarray]:
    """Suspected sets (indices into the candidate columns of `supports`, the sample's rows): groups of items
    supported together far more often than honest reports support them, each cut to its core: the items whose mean
    excess co-support with the group is at least half the largest (module docstring)."""
    rows = supports.astype(np.float32)
    m, k = rows.shape
    together = rows.T @ rows  # co-support counts (float32: exact below 2^24 rows)
    p, q = oracle.p, oracle.q
    f = np.clip(np.diag(together) / m - q, 0.0, None) / (p - q)  # the sample's own estimates
    expected = np.clip(q * q + q * (p - q) * (f[:, None] + f[None, :]), 1e-12, 1.0)
    z = bonferroni_z(policy.alpha_window, k * (k - 1) // 2)
    sd = np.sqrt(m * expected * (1 - expected))
    linked = (together > m * expected * (1 + PAIR_MARGIN) + z * sd) & ~np.eye(k, dtype=bool)
    sets = []
    excess = np.clip(together / m - expected, 0.0, None)
    np.fill_diagonal(excess, 0.0)
    for component in _components(linked):
        strength = excess[np.ix_(component, component)].mean(axis=1)
        members = component[strength >= strength.max() / 2]
        if len(members) >= MIN_SET:
            sets.append(members)
    return sets


def _components(linked: np.ndarray) -> list[np.ndarray]:
    """The connected components (of >= 2 items) of a symmetric adjacency matrix (small: candidates x candidates)."""
    label = -np.ones(linked.shape[0], dtype=np.int64)
    out = []
    for start in np.flatnonzero(linked.any(axis=1)):
        if label[start] >= 0:
            continue
        frontier, members = [int(start)], []
        label[start] = start
        while frontier:
            v = frontier.pop()
            members.append(v)
            for u in np.flatnonzero(linked[v] & (label < 0)):
                label[u] = start
                frontier.append(int(u))
        out.append(np.sort(np.array(members)))
    return out


def unary_tail(p: float, q: float, size: int, t: int) -> float:
    """P[Bern(p) + Bin(size - 1, q) >= t]: the chance that an honest UE report whose device's value is in a set of
    `size` items supports at least t of them (the worst case over values, as p > q)."""
    rest = size - 1
    return float(p * binom.sf(t - 2, rest, q) + (1 - p) * binom.sf(t - 1, rest, q))


def heavy_buckets(buckets: np.ndarray) -> np.ndarray:
    """(m, k + 1): per row of bucket numbers (m, k), how many distinct buckets hold at least t of its entries, for
    t = 0..k (column t)."""
    ordered = np.sort(buckets, axis=1)
    m, k = ordered.shape
    starts = np.ones((m, k), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    # each run of equal buckets: its length is the distance from its start to the next start
    row, col = np.nonzero(starts)
    ends = np.append(col[1:], k)
    ends[np.append(row[1:] != row[:-1], True)] = k  # a row's last run ends at k
    exactly = np.bincount(row * (k + 1) + (ends - col), minlength=m * (k + 1)).reshape(m, k + 1)
    return np.cumsum(exactly[:, ::-1], axis=1)[:, ::-1]  # at least t


def hash_tail(oracle: LocalHash, items: np.ndarray, alpha: float, samples: int = SEED_SAMPLES) -> list[float]:
    """Per t = 0, 1, ..., an upper confidence limit of max over devices of P[an honest report supports >= t items
    of S] for local hashing (module docstring), by Monte Carlo over seeds of the actual hash family; it stops at the
    first t whose limit is <= alpha."""
    rng = np.random.default_rng(SEED_RNG)
    a = rng.integers(1, HASH_PRIME, size=samples)
    b = rng.integers(0, HASH_PRIME, size=samples)
    heavy = heavy_buckets(hash_buckets(a[:, None], b[:, None], np.asarray(items)[None, :], oracle.g))
    p, other = oracle.p, (1 - oracle.p) / (oracle.g - 1)
    out = [1.0]
    for t in range(1, len(items) + 1):
        flag = np.where(heavy[:, t] > 0, p + other * np.maximum(heavy[:, t] - 1, 0), 0.0)
        out.append(min(1.0, upper_mean(float(flag.mean()), float(flag.std()), samples)))
        if out[-1] <= alpha:
            break
    return out


def report_threshold(oracle: FrequencyOracle, items: np.ndarray, alpha: float) -> tuple[int, float] | None:
    """(t, the honest flag probability bound at t): the least t >= 2 such that an honest report supports >= t items
    of S with probability <= alpha whatever its device's value; None if no t <= |S| is enough (then S cannot be told
    apart per report)."""
    size = len(items)
    if isinstance(oracle, UnaryEncoding):
        tails = [unary_tail(oracle.p, oracle.q, size, t) for t in range(size + 1)]
    elif isinstance(oracle, LocalHash):
        tails = hash_tail(oracle, items, alpha)
    else:
        return None
    for t in range(MIN_SET, len(tails)):
        if tails[t] <= alpha:
            return t, tails[t]
    return None


def supports_itemsets_apply(oracle: FrequencyOracle) -> bool:
    """Whether the itemset detector applies: reports that support sets of items (UE, local hashing)."""
    return isinstance(oracle, UnaryEncoding | LocalHash)


def support_itemsets(oracle: FrequencyOracle, reports: Reports, reference: Estimate | None = None,
                     policy: Policy = Policy(), stats: np.ndarray | None = None) -> Finding:
    """Reports that support a suspected itemset, set aside (module docstring); `flagged` marks them, `removed` is
    their exact statistics. `stats`: the reports' statistics if already accumulated. The pairs are counted on a
    sample of the rows (`pair_sample`); the supports of a suspected set, on every row."""
    n = int(len(next(iter(reports.values())))) if reports else 0
    if not supports_itemsets_apply(oracle):
        return Finding(ITEMSETS, UNTESTED, n, detail=f"{oracle.name} reports support one item each: no itemsets")
    if n < policy.min_reports:
        return too_few(ITEMSETS, n, policy)
    est = oracle.estimate(oracle.accumulate(reports) if stats is None else stats)
    items = candidate_items(est, reference, policy.candidates)
    sample = pair_sample(n)
    sampled = {k: np.asarray(v)[sample] for k, v in reports.items()}
    sets = linked_sets(oracle, candidate_supports(oracle, sampled, items), policy)
    z_count = bonferroni_z(policy.alpha_window, max(1, len(sets)))
    flagged = np.zeros(n, dtype=bool)
    found: list[int] = []
    notes = []
    for members in sets:
        codes = items[members]
        threshold = report_threshold(oracle, codes, policy.alpha_report)
        if threshold is None:
            notes.append(f"{len(codes)} linked item(s) that honest reports also support together: not separable")
            continue
        t, tail = threshold
        hits = candidate_supports(oracle, reports, codes).sum(axis=1) >= t
        # set aside only when more reports support >= t of S than honest devices would (a count test per set)
        if hits.sum() <= n * tail + z_count * math.sqrt(n * tail):
            notes.append(f"{len(codes)} linked item(s): no more reports support >= {t} of them than honest ones")
            continue
        flagged |= hits
        found += codes.tolist()
        notes.append(f"{len(codes)} item(s) supported together; reports supporting >= {t} of them set aside")
    if not flagged.any():
        return clean(ITEMSETS, n, policy.alpha_report, 0.0, "; ".join(notes))
    removed = oracle.accumulate({k: np.asarray(v)[flagged] for k, v in reports.items()})
    return Finding(ITEMSETS, SUSPECTED, n, float(flagged.sum()), removed, tuple(sorted(found)), policy.alpha_report,
                   0.0, "; ".join(notes), flagged)
