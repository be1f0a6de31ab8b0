"""Poisoning defence for heavy hitters (the prefix trees of `ldpstream.mechanisms.open_domain.tree`).

Cao, Jia and Gong (USENIX Security 2021, Sec. 5) promote fake strings into the top list: fake devices report the
targets' prefixes at every level. A report of a sketch oracle names one hashed bucket, so a fake report is what a
holder of the target would send; what honest perturbation makes improbable is the *rise*: a stationary population's
string frequency moves between a window and the collection's previous window only by noise. At each level of the
decode, every candidate prefix is estimated in the reference window as in this one (`peeled_estimates`, the same
joint estimation, so the collision bias of the fixed hash family is the same in both) and tested against

    b(x) = min(1, f_ref(x) + drift) + z sqrt(V(f_ref(x)) (1 / n_T + 1 / n_ref)), z = Phi^-1(1 - alpha_window / (2TC)),

C the candidates scored at that level, T the levels (Bonferroni over both and the two sides: the levels' tests are
on disjoint devices, and an honest window is flagged at any level with probability <= alpha_window), V the level
oracle's n Var at the reference frequency (the null's) plus the sampling of devices f (1 - f)
(`ldpstream.mechanisms.poisoning.frequency.window_variance`). The other side, f_ref(x) - drift - z sqrt(...),
finds a demoted string (fake reports that carry none of its prefixes push it down by beta (f + q / (p - q)), as they
do a frequency oracle's item): it is suspected and ranked by its reference frequency, so a genuine heavy hitter is
not pushed out of the top list (derived as `ldpstream.mechanisms.poisoning.frequency.lower_bounds`; a level's
buckets expect far more than a normal count of reports, so no candidate is left untested there). f_ref(x) is the
reference's estimate as it is, not clipped to [0, 1] (only V is taken at the clipped value): the collision bias of
the fixed hash family is the same in both windows and can put a rare string's expectation below zero by more than
the noise's standard deviation once the windows are large; a centre clipped to 0 then read that bias as a
demotion (588 false alarms in 1,000 honest windows of 1e6 reports at eps = 1, all on the lower side).

A candidate under its bound is not suspected, and the decoder ranks it (and the last level reports it) by its
estimate capped at one standard deviation of the rise over what the stationary population gives it,
min(value, min(1, f_ref(x) + drift) + s(x)), s(x) = sqrt(V(f_ref(x)) (1 / n_T + 1 / n_ref)). Only the ranking is
capped (the test keeps z, and its alpha_window): under a stationary population the rise is ~ N(0, s^2), so a genuine
string keeps its estimate with probability Phi(1) = 0.84 and loses E[(rise - s)+] = (phi(1) - Phi(-1)) s = 0.083 s
on average, while a fake string new to the window (f_ref ~ 0) is credited at most s(x) = sqrt(V(0) (1 / n_T +
1 / n_ref)), not z s(x). At eps = 1 PEM's noise is such that an attacker under the bound (5% fakes on 10 targets
raise each prefix 3.2 s per level, under z s = 5.5 s) would otherwise rank with the noise winners of PEM's beam; a
test on a string's rise summed over its levels does not separate them at alpha_window, since the beam keeps
prefixes for their estimates in this window (a noise path kept by the beam has summed rises as large as the
attacker's). A candidate above its bound is suspected, and ranked by min(1, f_ref(x) + drift): the rise the test
attributes to fake devices counts for nothing. Holding a suspect at b(x) instead (as `excess_claims` brings an item
back to its bound) would leave a detected attacker the most an undetected one keeps, and in a top list that is a
slot whenever fewer than `keep` genuine candidates clear b(x). PEM keeps exactly `top` prefixes per level (Wang et
al. TDSC 2019, Sec. 4), so a genuine heavy hitter whose short prefix fell out of the beam leaves such a slot. In an
honest window a candidate is suspected with probability <= alpha_window in all, and then it is ranked by its
reference estimate, an unbiased estimate of the same frequency. An attacker who knows the detector stays under the
bound and is ranked at most s(x) above its reference frequency.
Without a reference nothing can be tested (a fake string looks like a popular one): `ReferenceCap` is then not
built.

**Over windows.** Nothing is removed from a tree's sketches, so its windows enter the next windows' references raw,
and an attack that rises slowly (a ramp of 1%, 2%, ... 10% of fakes) is taken in by the four windows before: each
window's rise over them is a fraction of its fakes. The cap therefore tests each candidate against more than one
reference (`lagged`): the four windows before (budget alpha_window), and the lagged windows of the tests over
windows (`ldpstream.mechanisms.poisoning.sequential`), which an attack younger than their gap has not reached: the 8
windows before the latest 4 (the block test's; budget alpha_sequential) and the 48 before the latest 10 (the long
block test's, frozen; budget alpha_long). Against the four windows before, the test is the one above; against the
lagged windows it is the block tests': the candidate's estimate in this window and the recent ones summed (the
latest 4 and 10 windows, the others raw: `ldpstream.mechanisms.poisoning.attribute.blocks_of`), in f_block(x) >
min(1, f_lag(x) + drift) + z sqrt(V(f_lag(x)) (1 / n_block + 1 / n_lag)) (and its other side), z = Phi^-1(1 -
alpha_r / (2TC)), so an honest window has a suspect at any level against any reference with probability at most
alpha_window + alpha_sequential + alpha_long (union bound: the policy's per-window budget of an attribute, 1e-3).
The block replaces this window alone against the lagged windows (the same budgets, not split): a shift of delta sd
of one window, sustained over the block, shows as delta / sqrt(1 / B + 1 / R), 1.63 delta for the block test (B = 4,
R = 8) and 2.88 delta for the long one (10, 48), against 0.94 delta and 0.99 delta for this window alone; a shift
too young to fill the block is the four windows before's to find (delta / sqrt(1 + 1/4)), as for the frequency
oracles. PEM's demotion of the top string by 5% fakes at eps = 4 falls about 3 sd a window, under every
single-window z (5.2 to 6.0): 2.8 to 3.0 sd alone, 8.6 in the long block once it is filled (6.9 with the benchmark's
11 lagged windows). A candidate is suspected when it is above any of its bounds, and then ranked by the smallest of
its reference frequencies (below any lower bound: by the largest; a suspect of a block test is held to its lagged
windows' frequency, as an oracle's item is); under every bound, by its estimate capped at the smallest of f_ref,r(x)
+ s_r(x), s_r for this window against each reference (a cap, no test: it spends no budget). A ramp younger than ten
windows is then ranked at most one standard deviation above the long block's lagged windows, which hold none of it,
whatever the four windows before hold. An honest string's references are unbiased for the same frequency, so it is
ranked under its estimate when its rise over any of them exceeds that one's s_r: with probability at most 3 (1 -
Phi(1)) = 0.48 (one reference: 0.16), by at most sum_r E[(rise_r - s_r)+] = 3 x 0.083 s on average; the benchmark
measures what that does to an honest window's top list (`bench_poisoning_windows.py`, honest: the genuine top
strings found, with and without the lagged windows). A tree's level has a frequency oracle's variance, so the
standardization is `ldpstream.mechanisms.poisoning.frequency`'s (`_spread`, `block_shift`), the lagged sums as a
reference. The lagged references and the blocks are sums of windows the read path already adds (`blocks_of`): no
tree is decoded but the window's own (each candidate is estimated in the sums, as in a reference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ldpstream.mechanisms.frequency.base import split_count
from ldpstream.mechanisms.open_domain.sketch import HashedGRR
from ldpstream.mechanisms.open_domain.tree import PrefixTree, peeled_estimates, peeled_leaders, peeled_with
from ldpstream.mechanisms.poisoning.base import Policy, bonferroni_z

HEAVY = "heavy_hitter_rise"


@dataclass
class ReferenceCap:
    """The cap of a tree's decode by a reference window's statistics (module docstring): per candidate,
    min(1, f_ref(x) + drift) plus one standard deviation s(x) of its rise, or without it for a suspect (above b(x));
    a candidate below the lower bound (demoted) at its reference frequency. `lagged`: further references, each with
    its own false-alarm budget and the block tested against it (the lagged windows a ramp has not reached yet, and
    this window with the recent ones summed: "Over windows" in the module docstring); the reference's budget is the
    policy's alpha_window. `tests`: the candidates a level's Bonferroni
    counts (None: those it is called with; a caller that scores a few strings as a decode would sets the decode's).
    It records, per level, the suspects: `capped[level]` = list of (candidate row, estimate, bound), and
    `raised[level]` those found below."""

    tree: PrefixTree
    reference: np.ndarray
    policy: Policy = field(default_factory=Policy)
    lagged: tuple[tuple[np.ndarray, float, np.ndarray | None], ...] = ()
    tests: int | None = None
    capped: dict[int, list[tuple[np.ndarray, float, float]]] = field(default_factory=dict)
    raised: dict[int, list[tuple[np.ndarray, float, float]]] = field(default_factory=dict)

    def usable(self) -> bool:
        """Whether every level of the reference has enough reports to compare with."""
        return self._usable(self.reference)

    def _usable(self, stats: np.ndarray) -> bool:
        return all(oracle.z_table(self.tree.level_stats(stats, t))[1] >= self.policy.min_reports
                   for t, oracle in enumerate(self.tree.oracles))

    def with_lagged(self, lagged: tuple[tuple[np.ndarray, float, np.ndarray | None], ...]) -> ReferenceCap:
        """This cap with the `lagged` references (statistics, budget, the block tested against them: this window
        and the recent ones summed; None: this window alone) that have enough reports at every level."""
        return ReferenceCap(self.tree, self.reference, self.policy,
                            tuple((np.asarray(stats, dtype=np.float64), float(alpha),
                                   None if block is None else np.asarray(block, dtype=np.float64))
                                  for stats, alpha, block in lagged if self._usable(stats)), self.tests)

    @property
    def false_positive(self) -> float:
        """The probability that an honest window has a suspect, either way (union bound over the references)."""
        return self.policy.alpha_window + sum(alpha for _, alpha, _ in self.lagged)

    def __call__(self, level: int, candidates: np.ndarray, value: np.ndarray, n: int, keep: int) -> np.ndarray:
        """What the decoder ranks the candidates by (module docstring): a suspect above its bound at its lowest
        reference frequency, one below at its highest, the others at min(value, the least f_ref + s)."""
        oracle = self.tree.oracles[level]
        if n < self.policy.min_reports:
            return value
        size = len(candidates)
        base, cap, bound = (np.full(size, np.inf) for _ in range(3))
        top, floor = np.full(size, -np.inf), np.full(size, -np.inf)
        over, under = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
        for stats, alpha, block in ((self.reference, self.policy.alpha_window, None), *self.lagged):
            table, n_ref = oracle.z_table(self.tree.level_stats(stats, level))
            if n_ref < self.policy.min_reports:
                continue
            if block is None:
                ref_value, _ = peeled_estimates(oracle, table, n_ref, candidates, keep)
            else:  # the block and its lagged windows estimated with one set of leaders, those of the two pooled:
                # each estimate is then the same linear function of its table / n, so their difference has
                # expectation zero on a stationary population (with each table's own leaders it did not, and the
                # block's small standard deviation made that a false alarm: 2 in 200 honest windows at eps = 1)
                block_table, n_block = oracle.z_table(self.tree.level_stats(block, level))
                pooled, n_pooled = oracle.z_table(self.tree.level_stats(block + stats, level))
                leaders = peeled_leaders(oracle, pooled, n_pooled, candidates, keep)[2]
                ref_value, _ = peeled_with(oracle, table, n_ref, candidates, leaders)
                summed, _ = peeled_with(oracle, block_table, n_block, candidates, leaders)
            f0 = np.clip(ref_value, 0.0, 1.0)
            var = oracle.variance(f0) + f0 * (1.0 - f0)  # and the sampling of devices (`window_variance`)
            z = bonferroni_z(alpha / self.tree.levels, 2 * (self.tests or size))  # both ways
            # centred on the reference's estimate as it is, not clipped to [0, 1]: a fixed hash family's collision
            # bias (`sketch`) is the same in both, and can put a string's expectation below zero by more than the
            # noise at large n; a clipped centre of 0 then flagged it as demoted (588 false alarms in 1,000 honest
            # windows of 1e6 reports at eps = 1)
            up, down = np.minimum(1.0, ref_value + self.policy.drift), ref_value - self.policy.drift
            sd = np.sqrt(var / n + var / n_ref)
            if block is None:  # this window against the windows before
                high, low = up + z * sd, down - z * sd
                over_r, under_r = value > high, value < low
            else:  # the block test's: this window and the recent ones summed, against the lagged windows
                spread = z * np.sqrt(var / n_block + var / n_ref)
                over_r, under_r = summed > up + spread, summed < down - spread
                high, low = up, down  # a suspect is held to the lagged windows' level (as an oracle's item)
            base, cap, top = np.minimum(base, up), np.minimum(cap, up + sd), np.maximum(top, down)
            bound = np.minimum(bound, np.where(over_r, high, np.inf))
            floor = np.maximum(floor, np.where(under_r, low, -np.inf))
            over, under = over | over_r, under | under_r
        if not np.isfinite(base).all():
            return value
        under &= ~over
        self.capped[level] = [(candidates[i], float(value[i]), float(bound[i])) for i in np.flatnonzero(over)]
        self.raised[level] = [(candidates[i], float(value[i]), float(floor[i])) for i in np.flatnonzero(under)]
        return np.where(over, base, np.where(under, top, np.minimum(value, cap)))


def set_aside_estimate(tree: PrefixTree, stats: np.ndarray, level: int, rows: np.ndarray, bounds: np.ndarray
                       ) -> tuple[float, float]:
    """(the reports of a level that carry one of its suspected prefixes `rows`, the fewest of them that explain the
    suspects' rise over their `bounds`): nothing is removed from the sketches, so this is the figure a tree's finding
    reports as set aside, and it never exceeds the carriers.

    A hashed-GRR report (PEM's levels) names one cell (hash j, bucket y) and carries prefix x when y = h_j(x): the
    carriers are exactly the counts of the cells the suspects cover. An honest report of hash j lands in bucket y
    with probability q + (p - q) P[its value hashes to y], and at the bound P[value hashes to y] is the suspects'
    bounds in y plus the rest of the mass spread over the g buckets, F_y + (1 - F) / g (F: the suspects' bounds
    summed, at most 1): the carriers expected from honest devices are n_j times that, summed over the covered cells,
    and the rest are the fewest crafted reports that explain them (derived here; counting every report of the level
    as honest, fakes included, makes it smaller). Other sketches (HCMS: a report is one signed Hadamard coefficient,
    which half the buckets read as support) have no such cell: every report of the level may carry a suspect, and
    the estimate is the suspects' rise times n_T, at most n_T."""
    oracle = tree.oracles[level]
    sums, n_t = split_count(tree.level_stats(stats, level), oracle.stats_size)
    b = np.clip(np.asarray(bounds, dtype=np.float64), 0.0, 1.0)
    if isinstance(oracle, HashedGRR):
        k, g, p, q = oracle.hashes, oracle.width, oracle.p, oracle.q
        table = np.asarray(sums, dtype=np.float64).reshape(k, g)
        buckets = oracle.candidate_buckets(rows)  # (suspects, k)
        hashes = np.broadcast_to(np.arange(k), buckets.shape)
        mass, covered = np.zeros((k, g)), np.zeros((k, g), dtype=bool)
        np.add.at(mass, (hashes, buckets), np.broadcast_to(b[:, None], buckets.shape))
        covered[hashes, buckets] = True
        honest = q + (p - q) * (mass + (1.0 - min(1.0, float(b.sum()))) / g)
        carriers = float(table[covered].sum())
        expected = float((table.sum(axis=1, keepdims=True) * honest)[covered].sum())
        return carriers, min(carriers, max(0.0, carriers - expected))
    est = np.asarray(oracle.frequencies(tree.level_stats(stats, level), rows).value, dtype=np.float64)
    return float(n_t), min(float(n_t), float(n_t * np.clip(est - b, 0.0, None).sum()))
