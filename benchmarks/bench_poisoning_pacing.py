"""The most an attacker who paces itself under every test of the chain keeps after T windows (issue 42 item 2), as
a multiple of the one-window bound: a linear program over its expected levels L_1..L_T above the genuine frequency
(units: one window's standard deviation of the item's estimate; 0 before the attack), subject to, at every window t,
- the window's test: L_t - mean(L_{t-4..t-1}) <= z_w sqrt(1 + 1/4) (the reference holds its earlier windows, which
  passed), z_w = Phi^-1(1 - alpha_window / 2K);
- the CUSUM: every suffix sum of its steps x_i = (L_i - mean(L_{i-4..i-1})) / sqrt(1 + 1/4), less k = 1/2 a step,
  stays under h (S_t = max(0, S_{t-1} + x_t - k) <= h is exactly that);
- the block test: (mean(L_{t-3..t}) - mean(L_{t-11..t-4})) / sqrt(1/4 + 1/8) <= z_b;
- the long block test: (mean(L_{t-9..t}) - mean(L_{t-57..t-10})) / sqrt(1/10 + 1/48) <= z_l, its every-item part
  (z_l = Phi^-1(1 - LONG_ALL_SHARE alpha_long / 2K); its top-item part looks only down), or for a mean (--items 1,
  one statistic) all of alpha_long, two-sided: z_l = Phi^-1(1 - alpha_long / 2).
Noise is left out (an attacker who wants to pass must keep a margin under each bound, so this is an upper bound on
its expected gain). The one-window bound is z_w sqrt(1 + 1/4): the most the first window keeps. With --margin M the
attacker keeps M standard deviations under every test (a CUSUM sum of j steps: M sqrt(j), as if its steps were
independent), as `bench_poisoning_windows.py`'s attacker does in the window's test (M = 2.5), and the ratio is to
its first window's (z_w - M) sqrt(1 + 1/4), the one-window adaptive gain. With --history H,
the attack begins after H honest windows (level 0), and a test's lagged windows are only those that exist (a young
collection: fewer lagged windows, a wider bound: sqrt(1/10 + 1/L)); by default its lagged windows are full.

Prints one JSON row per T: windows, ratio with the CUSUM only, with the block test too, and with the long block
test too (all the tests over windows the chain runs).
Run: .venv/bin/python benchmarks/bench_poisoning_pacing.py [--items 1024] [--windows 1,5,10,20,50] [--history H]
     [--margin M]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
from scipy.optimize import linprog

from ldpstream.mechanisms.poisoning.base import Policy, bonferroni_z
from ldpstream.mechanisms.poisoning.sequential import (
    BLOCK_WINDOWS,
    LAG_WINDOWS,
    LONG_ALL_SHARE,
    LONG_LAG,
    LONG_WINDOWS,
    K,
    threshold,
)

REFERENCE = 4  # the windows a reference sums (bench_poisoning.REFERENCE_WINDOWS)


def window_bound(items: int, policy: Policy, margin: float = 0.0) -> float:
    """The most the first window keeps, margin standard deviations under the window's test (in one window's
    standard deviations)."""
    return max(0.0, bonferroni_z(policy.alpha_window, 2 * items) - margin) * math.sqrt(1 + 1 / REFERENCE)


def largest_level(windows: int, items: int, policy: Policy, block: bool, long: bool = False,
                  history: int | None = None, margin: float = 0.0) -> float:
    """max L_T under the constraints of the module docstring (in one window's standard deviations)."""
    return float(paced_levels(windows, items, policy, block, long, history, margin)[-1])


def paced_levels(windows: int, items: int, policy: Policy, block: bool = True, long: bool = True,
                 history: int | None = None, margin: float = 0.0) -> np.ndarray:
    """The levels L_1..L_T that maximise L_T under the constraints of the module docstring (in one window's
    standard deviations), with the block test if `block`, the long block test if `long`, after `history` honest
    windows (None: as many as any test reads), each test's statistic `margin` standard deviations under its bound
    (a CUSUM sum of j steps: margin sqrt(j)): the path of the attacker who paces itself best."""
    z_w = bonferroni_z(policy.alpha_window, 2 * items) - margin
    z_b = bonferroni_z(policy.alpha_sequential / 2, 2 * items) - margin
    z_l = (bonferroni_z(policy.alpha_long, 2) if items == 1
           else bonferroni_z(LONG_ALL_SHARE * policy.alpha_long, 2 * items)) - margin
    h = threshold(policy.alpha_sequential / 2, items)
    spread = math.sqrt(1 + 1 / REFERENCE)
    oldest = None if history is None else 1 - history  # the first window there is

    def level(i: int) -> np.ndarray:
        v = np.zeros(windows)
        if 1 <= i <= windows:
            v[i - 1] = 1.0
        return v

    def present(first: int, last: int) -> range:
        return range(first if oldest is None else max(first, oldest), last + 1)

    def mean(first: int, last: int) -> np.ndarray:
        there = present(first, last)
        return np.sum([level(i) for i in there], axis=0) / len(there) if there else np.zeros(windows)

    def shift(latest: int, lagged: int, t: int) -> np.ndarray | None:
        """The block test's statistic of `latest` windows against the `lagged` before them, or None: no lag yet."""
        lag = len(present(t - latest - lagged + 1, t - latest))
        if lag == 0:
            return None
        return (mean(t - latest + 1, t) - mean(t - latest - lagged + 1, t - latest)) / math.sqrt(1 / latest + 1 / lag)

    rows, bounds, steps = [], [], []
    for t in range(1, windows + 1):
        step = (level(t) - mean(t - REFERENCE, t - 1)) / spread
        steps.append(step)
        rows.append(step)
        bounds.append(z_w)
        for j in range(t):
            rows.append(np.sum(steps[j:], axis=0))
            bounds.append(h + K * (t - j) - margin * math.sqrt(t - j))
        for on, latest, lagged, z in ((block, BLOCK_WINDOWS, LAG_WINDOWS, z_b), (long, LONG_WINDOWS, LONG_LAG, z_l)):
            y = shift(latest, lagged, t) if on else None
            if y is not None:
                rows.append(y)
                bounds.append(z)
    result = linprog(-level(windows), A_ub=np.array(rows), b_ub=np.array(bounds), bounds=[(0, None)] * windows)
    return np.asarray(result.x, dtype=np.float64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--windows", default="1,5,10,20,50")
    parser.add_argument("--history", type=int, default=None,
                        help="honest windows before the attack (default: every test's lagged windows full)")
    parser.add_argument("--margin", type=float, default=0.0,
                        help="standard deviations the attacker keeps under every test (default 0: exactly at them)")
    args = parser.parse_args(argv)
    policy = Policy()
    one = window_bound(args.items, policy, args.margin)

    def ratio(t: int, block: bool, long: bool) -> float:
        return round(largest_level(t, args.items, policy, block, long, args.history, args.margin) / one, 3)

    rows = [{"windows": t, "items": args.items, "history": args.history, "margin": args.margin,
             "one_window_sd": round(one, 3),
             "ratio_cusum_only": ratio(t, False, False), "ratio_with_block": ratio(t, True, False),
             "ratio_with_long_block": ratio(t, True, True)}
            for t in (int(w) for w in args.windows.split(","))]
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
