"""Map an attribute's declared range [lo, hi] onto the mechanisms' unit interval [-1, 1] and back.

The map is affine, so an unbiased estimate of the mean on [-1, 1] maps to an unbiased estimate of the mean on
[lo, hi], and its standard error scales by (hi - lo) / 2 (000 Sec. III-B, the remark after Alg. 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ldpstream.mechanisms.base import Estimate, LDPError


@dataclass(frozen=True)
class RangeScaler:
    """The affine map between [lo, hi] and [-1, 1].

    Examples
    --------
    >>> s = RangeScaler(0.0, 10.0)
    >>> s.to_unit([0.0, 5.0, 10.0]).tolist()
    [-1.0, 0.0, 1.0]
    """

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo < self.hi):
            raise LDPError(f"an attribute range needs finite lo < hi, got [{self.lo}, {self.hi}]")

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2.0

    def to_unit(self, values: np.ndarray | list[float]) -> np.ndarray:
        """Values on [lo, hi] as float64 on [-1, 1]; LDPError for NaN or a value outside [lo, hi]."""
        x = np.asarray(values, dtype=np.float64)
        if x.size and not (x.min() >= self.lo and x.max() <= self.hi):
            bad = "NaN" if np.isnan(x).any() else "a value outside"
            raise LDPError(f"attribute values contain {bad} [{self.lo}, {self.hi}]")
        # Clip guards only floating-point rounding at the end points; the check above already passed.
        return np.clip((x - self.lo) / self.half_width - 1.0, -1.0, 1.0)

    def from_unit(self, values: np.ndarray) -> np.ndarray:
        """Values (or estimates) on [-1, 1] back on the attribute's scale."""
        return self.lo + (np.asarray(values, dtype=np.float64) + 1.0) * self.half_width

    def estimate_from_unit(self, est: Estimate) -> Estimate:
        """An estimate of a mean on [-1, 1] as an estimate of the mean on [lo, hi] (affine, so still unbiased)."""
        return Estimate(n=est.n, value=self.from_unit(est.value), stderr=np.asarray(est.stderr) * self.half_width)
