"""A sequential test over windows: a CUSUM of each item's standardized excess (Page, "Continuous inspection schemes",
Biometrika 1954), two-sided, so that an attacker who stays under the per-window bound in every window is still found.

In each window t, after its own tests, an item's standardized excess over its reference is

    x_t(v) = (f_t(v) - f_ref,t(v)) / sqrt(V(f_ref) (1 / n_t + 1 / n_ref)),

~ N(0, 1) in an honest window (the same standard deviation as the per-window bound,
`ldpstream.mechanisms.poisoning.frequency.window_variance`). Two sums per item,

    S+_t = max(0, S+_{t-1} + x_t - k),    S-_t = max(0, S-_{t-1} - x_t - k),

raise an alarm when one passes h. The drift k = 1/2 is tuned to a shift of one standard deviation per window (Page's
k = delta / 2): an attacker under the per-window bound z (~4.9 sd at K = 1,024) who takes more than k each window is
caught after about h / (x - k) windows. One who takes less than k each window keeps at most k sd per window plus h
once; the reference then follows it (its past windows are clean), which `docs/explanation/fake-devices.md` states
in numbers.

h follows from the false-alarm rate. For x ~ N(0, 1) the average run length of one side before a false alarm is,
after Siegmund ("Sequential analysis", 1985, Eq. 2.57, with the boundary correction rho = 1.166 for normal steps),

    ARL0(k, h) = (exp(2 k b) - 2 k b - 1) / (2 k^2),    b = h + 1.166,

so 2 K one-sided sums raise a false alarm in a window with probability about 2 K / ARL0 (Bonferroni; the x_t of
consecutive windows share reference windows and are negatively correlated, which lengthens the run). `threshold`
solves ARL0 = 2 K / alpha for the per-window rate alpha: half the policy's `Policy.alpha_sequential`, the block test
below having the other half, so that the two together raise a false alarm in an honest window with probability at
most alpha_sequential.

**The block test.** A CUSUM compares each window with a reference that takes in the attacker's earlier windows when
they pass (its past windows are clean), so a steady attack fades from its steps after REFERENCE windows: a top item
demoted by 4.5 sd a window (GRR at eps 4, 5% fakes) steps 4, 3, 2, 1 and 0 sd, and its sum stops near 8 < h. The
block test compares the latest BLOCK_WINDOWS windows together (this one included) with the LAG_WINDOWS defended
windows before them, which an attack that began within the block has not reached. The latest windows are summed raw
(this one as its earlier tests left it): a window the test held then stays in the block with its attack, so the test
holds it again in each window until it leaves the block, where a block of defended windows would see the attack
removed from it and let an attacker under the window's bound go (`ldpstream.mechanisms.poisoning.attribute.blocks_of`;
on honest windows raw = defended, except just after a false alarm, whose window can raise it again while in the
block):

    y(v) = (f_block(v) - f_lag(v)) / sqrt(V(f_lag) (1 / n_block + 1 / n_lag)),

N(0, 1) in an honest window (the same standardization as the window's own test), two-sided, Bonferroni over the K
items: |y| > Phi^-1(1 - (alpha_sequential / 2) / 2K) (5.46 at K = 1,024 and 1e-4). A shift of delta sd per window
sustained over the block shows as delta / sqrt(1 / B + 1 / R) = 1.63 delta (B = 4, R = 8): the demotion above,
4.5 sd a window, is at 7.3 sd in the block test at its fourth window (found with probability Phi(7.3 - 5.46) =
0.97). Consecutive windows' blocks overlap, so their tests are correlated, but each window's holds its rate by
itself. An item the block test finds is held, on that side, to the lagged windows' estimate in this window.
A numeric mean is one statistic, y = (mean_block - mean_lag) / sqrt(v (1 / n_block + 1 / n_lag)), v the lagged
windows' variance of one report (device sampling counted: `ldpstream.mechanisms.poisoning.numeric.standardized_shift`),
|y| > Phi^-1(1 - (alpha_sequential / 2) / 2) (4.06 at 1e-4), held likewise at the lagged windows' mean.

**The long block test.** Fake reports that support none of a top item and spread uniformly over the others (GRR)
displace honest reports of the q floor almost exactly, so a window's histogram is that of an honest drop: the item's
estimate falls by beta (f + q / (p - q)) = beta (f + 1 / (e^eps - 1)) a window, and nothing else moves. At eps = 1,
K = 1,024, 1e6 reports a window and beta = 5% (f = 0.133, Zipf(1)), that is delta = 1.78 sd a window: under the
window's bound (4.97 x sqrt(1 + 1/4) = 5.55 sd), and the block test above (5.46 sd over 2K tests, its reference
absorbing attacked windows after BLOCK_WINDOWS) sees 1.63 delta = 2.9 sd. The one signal is the sustained drop.
The long block test compares the latest LONG_WINDOWS windows (this one included, the others raw, as the block
test's) with the LONG_LAG defended windows before them (frozen: an attack younger than the long block is not in them),

    y(v) = (f_block(v) - f_lag(v)) / sqrt(V(f_lag) (1 / n_block + 1 / n_lag)),   N(0, 1) in an honest block,

in two parts of its budget alpha_long:
- the top item, down: the DEMOTION_ITEMS largest items of the pooled estimate (the long block and its lagged
  windows together; for normal estimates of equal variance the pooled mean is independent of the difference tested,
  so choosing on it leaves that difference N(0, 1)), y < -Phi^-1(1 - (1 - LONG_ALL_SHARE) alpha_long / m). Power,
  derived: after LONG_WINDOWS = 10 attacked windows y ~ N(-delta / sqrt(1 / 10 + 1 / 48), 1) = N(-5.11, 1),
  against z = Phi^-1(1 - 1.5e-4) = 3.62 (m = 1, alpha_long = 2e-4): found with probability Phi(1.50) = 0.93
  (m = 2: 0.90; the block test alone, 2.9 sd against 5.46: 0.01; with no lag noise at all, n_lag -> infinity,
  Phi(5.62 - 3.62) = 0.98, the ceiling at ten windows);
- every item, both ways: |y| > Phi^-1(1 - LONG_ALL_SHARE alpha_long / 2K) (5.46 at K = 1,024): an attacker under
  every per-window bound whose targets rise about 3 sd a window over a reference that follows them shows at about
  3 / sqrt(1 / 10 + 1 / 48) = 8.6 sd here once its rise fills the block.
An item it finds is held, on that side, to the lagged windows' estimate in this window (GRR demotion: the missing
supports given back; what an honest item that truly moves pays, at rate alpha_long). A numeric mean has no top item:
all of alpha_long goes to its one two-sided test, |y| > Phi^-1(1 - alpha_long / 2) (3.72 at 2e-4), y as the block
test's. An attacker who raises the mean about 0.9 sd of a window's difference over a reference that follows it
(under the window's bound, and 0.4 a window over the CUSUM's drift k: about 4 in ten windows against h = 8.7), its
rise growing as the reference takes it in, shows here at about 7.4 sd after ten windows (48 lagged windows;
`docs/explanation/fake-devices.md`).
"""

from __future__ import annotations

import math

import numpy as np

CUSUM = "drift_cusum"
BLOCK = "drift_block"
LONG = "long_block"
BLOCK_WINDOWS = 4  # B: the latest windows the block test sums, this one included
LAG_WINDOWS = 8  # R: the windows before them it compares with
LONG_WINDOWS = 10  # the long block test's latest windows, this one included
LONG_LAG = 48  # the defended windows before them it compares with (frozen: two days of hourly windows)
DEMOTION_ITEMS = 1  # m: the largest items its demotion part watches (chosen in advance: its multiplicity)
LONG_ALL_SHARE = 0.25  # the share of alpha_long its every-item part spends (5e-5 of 2e-4)
K = 0.5  # the drift: half the shift, in standard deviations per window, the sums are tuned to
RHO = 1.166  # Siegmund's correction for the overshoot of normal steps (E[overshoot] = 0.583 per unit of scale, x 2)


def average_run_length(k: float, h: float) -> float:
    """Siegmund's ARL0 of a one-sided CUSUM of N(0, 1) steps with drift k and threshold h (module docstring).

    Examples
    --------
    >>> round(average_run_length(0.5, 4.0))
    338
    """
    b = h + RHO
    return (math.exp(2 * k * b) - 2 * k * b - 1) / (2 * k * k)


def threshold(alpha: float, items: int, k: float = K) -> float:
    """The h at which 2 `items` one-sided sums raise a false alarm in an honest window with probability about
    `alpha` (ARL0 = 2 items / alpha; module docstring).

    Examples
    --------
    >>> round(threshold(1e-4, 1024), 2)
    14.98
    """
    target = 2 * max(1, items) / alpha
    lo, hi = 0.0, 200.0
    for _ in range(100):  # ARL0 grows with h: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if average_run_length(k, mid) < target else (lo, mid)
    return hi


def cusum_step(upper: np.ndarray, lower: np.ndarray, x: np.ndarray, k: float = K) -> tuple[np.ndarray, np.ndarray]:
    """The two sums after one window of standardized excesses `x` (module docstring); NaN steps (an item not
    tested in the window) leave its sums as they were."""
    step = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0)
    tested = np.isfinite(np.asarray(x, dtype=np.float64))
    up = np.where(tested, np.maximum(0.0, upper + step - k), upper)
    down = np.where(tested, np.maximum(0.0, lower - step - k), lower)
    return up, down
