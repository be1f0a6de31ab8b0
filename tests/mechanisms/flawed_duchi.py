"""The published multidimensional Duchi et al. mechanism, kept ONLY for tests (never shipped, never registered).

- `Published000Duchi`: 000 Alg. 3 as printed (T+ = {z.v >= 0}, T- = {z.v <= 0}, u ~ e^eps / (e^eps + 1)) with
  000 Eq. 9-10's constant. For even d the tied outputs (z.v = 0) sit in both sets.
- `Published001Duchi`: the original as 001 Alg. 1 prints it (T+ = {z.v > 0}, T- = {z.v <= 0},
  u ~ e^eps / (e^eps + 1)) with 001 Eq. 1-2's constant; 001 Sec. 3.1 shows it biased and 3e^eps-ratio at d = 2.
Both reuse the shipped sampler (`DuchiVector`) and change only the per-agreement weights and the constant.
"""

from __future__ import annotations

import math

import numpy as np

from ldpstream.mechanisms.multidim import DuchiVector


class Published000Duchi(DuchiVector):
    def agreement_weights(self) -> np.ndarray:
        d, e = self.dims, math.exp(self.epsilon)
        dot = 2 * np.arange(d + 1) - d
        counts = np.array([math.comb(d, a) for a in range(d + 1)])
        plus, minus = counts[dot >= 0].sum(), counts[dot <= 0].sum()
        return e / (e + 1) / plus * (dot >= 0) + 1 / (e + 1) / minus * (dot <= 0)

    def output_bound(self) -> float:
        d = self.dims
        if d % 2:
            c = 2 ** (d - 1) / math.comb(d - 1, (d - 1) // 2)  # 000 Eq. 9, odd d
        else:
            c = (2 ** (d - 1) + math.comb(d, d // 2) / 2) / math.comb(d - 1, d // 2)  # 000 Eq. 9, even d
        return (math.exp(self.epsilon) + 1) / (math.exp(self.epsilon) - 1) * c  # 000 Eq. 10


class Published001Duchi(DuchiVector):
    def agreement_weights(self) -> np.ndarray:
        d, e = self.dims, math.exp(self.epsilon)
        dot = 2 * np.arange(d + 1) - d
        counts = np.array([math.comb(d, a) for a in range(d + 1)])
        plus, minus = counts[dot > 0].sum(), counts[dot <= 0].sum()
        return np.where(dot > 0, e / (e + 1) / plus, 1 / (e + 1) / minus)

    def output_bound(self) -> float:
        d, em1 = self.dims, math.expm1(self.epsilon)
        c = 2 ** (d - 1) if d % 2 else 2 ** (d - 1) - math.comb(d, d // 2) / 2  # 001 Eq. 1
        central = math.comb(d - 1, (d - 1) // 2) if d % 2 else math.comb(d - 1, d // 2)
        return (2**d + c * em1) / (central * em1)  # 001 Eq. 2
