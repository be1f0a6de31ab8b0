"""The most an attacker who paces itself under every test of the chain keeps after T windows (issue 42 item 2), as
a multiple of the one-window bound: a linear program over its expected levels L_1..L_T above the genuine frequency
(units: one window's standard deviation of the item's estimate; 0 before the attack), subject to, at every window t,
- the window's test: L_t - mean(L_{t-4..t-1}) <= z_w sqrt(1 + 1/4) (the reference holds its earlier windows, which
  passed), z_w = Phi^-1(1 - alpha_window / 2K);
- the CUSUM: every suffix sum of its steps x_i = (L_i - mean(L_{i-4..i-1})) / sqrt(1 + 1/4), less k = 1/2 a step,
  stays under h (S_t = max(0, S_{t-1} + x_t - k) <= h is exactly that);
- the block test: (mean(L_{t-3..t}) - mean(L_{t-11..t-4})) / sqrt(1/4 + 1/8) <= z_b.
Noise is left out (an attacker who wants to pass must keep a margin under each bound, so this is an upper bound on
its expected gain). The one-window bound is z_w sqrt(1 + 1/4): the most the first window keeps.

Prints one JSON row per T: windows, ratio with the CUSUM only, ratio with the block test too.
Run: .venv/bin/python benchmarks/bench_poisoning_pacing.py [--items 1024] [--windows 1,5,10,20,50]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
from scipy.optimize import linprog

from ldpstream.mechanisms.poisoning.base import Policy, bonferroni_z
from ldpstream.mechanisms.poisoning.sequential import BLOCK_WINDOWS, LAG_WINDOWS, K, threshold

REFERENCE = 4  # the windows a reference sums (bench_poisoning.REFERENCE_WINDOWS)


def largest_level(windows: int, items: int, policy: Policy, block: bool) -> float:
    """max L_T under the constraints of the module docstring (in one window's standard deviations)."""
    z_w = bonferroni_z(policy.alpha_window, 2 * items)
    z_b = bonferroni_z(policy.alpha_sequential / 2, 2 * items)
    h = threshold(policy.alpha_sequential / 2, items)
    spread = math.sqrt(1 + 1 / REFERENCE)

    def level(i: int) -> np.ndarray:
        v = np.zeros(windows)
        if 1 <= i <= windows:
            v[i - 1] = 1.0
        return v

    def mean(first: int, last: int) -> np.ndarray:
        return np.sum([level(i) for i in range(first, last + 1)], axis=0) / (last - first + 1)

    rows, bounds, steps = [], [], []
    for t in range(1, windows + 1):
        step = (level(t) - mean(t - REFERENCE, t - 1)) / spread
        steps.append(step)
        rows.append(step)
        bounds.append(z_w)
        for j in range(t):
            rows.append(np.sum(steps[j:], axis=0))
            bounds.append(h + K * (t - j))
        if block:
            rows.append((mean(t - BLOCK_WINDOWS + 1, t) - mean(t - BLOCK_WINDOWS - LAG_WINDOWS + 1, t - BLOCK_WINDOWS))
                        / math.sqrt(1 / BLOCK_WINDOWS + 1 / LAG_WINDOWS))
            bounds.append(z_b)
    result = linprog(-level(windows), A_ub=np.array(rows), b_ub=np.array(bounds), bounds=[(0, None)] * windows)
    return float(-result.fun)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--windows", default="1,5,10,20,50")
    args = parser.parse_args(argv)
    policy = Policy()
    one = bonferroni_z(policy.alpha_window, 2 * args.items) * math.sqrt(1 + 1 / REFERENCE)
    rows = [{"windows": t, "one_window_sd": round(one, 3),
             "ratio_cusum_only": round(largest_level(t, args.items, policy, False) / one, 3),
             "ratio_with_block": round(largest_level(t, args.items, policy, True) / one, 3)}
            for t in (int(w) for w in args.windows.split(","))]
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
