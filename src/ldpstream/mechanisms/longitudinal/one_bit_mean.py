"""Microsoft's 1BitMean with alpha-point rounding and memoization (Ding, Kulkarni and Yekhanin, NeurIPS 2017).

On [-1, 1] (their [0, m] mapped by x = m (t + 1) / 2), 1BitMean sends one bit, 1 with probability 1/2 + t / (2B), B =
(e^eps + 1) / (e^eps - 1) (their Sec. 2.1; it is Duchi et al.'s mechanism, `ldpstream.mechanisms.numeric.duchi`), and
the server averages the bits mapped to +-B.

Memoization (their Sec. 3.1). The grid a_j = -1 + 2 j / s, j = 0..s, splits [-1, 1] into s buckets. A device draws alpha
uniform on [0, 1) once; a value t = a_j + L (2/s), L in [0, 1), is rounded to a_{j+1} iff L + alpha >= 1, else to a_j.
Over the devices' alpha this is unbiased (P[up] = L). The bit for each grid point is memoized per (device, j) at
eps_lifetime; alpha and the bits are read from the device secret (`ldpstream.mechanisms.longitudinal.memo`). Output
perturbation (their Sec. 3.3), optional: each report flips the memoized bit afresh with probability gamma. The paper
draws alpha from a discrete grid; a continuous alpha makes the rounding exactly unbiased.

Privacy. The reports of a device whose rounded value stays a_j are post-processings of one eps_lifetime-LDP bit
(alpha does not depend on the value): eps_lifetime however many there are; a device whose values visit L grid
points spends at most L eps_lifetime. One report: P[y = 1 | t] = gamma + (1 - 2 gamma)(1/2 + t / (2B)) (the
rounding is linear in alpha and the bit's probability linear in the rounded value), so one report is
eps_1 = ln((e^eps (1 - gamma) + gamma) / ((1 - gamma) + gamma e^eps))-LDP (`flipped_epsilon`).

Estimator (derived): with y = 1 reported as +B / (1 - 2 gamma) and y = 0 as -B / (1 - 2 gamma), E[t* | t] = t, and
B / (1 - 2 gamma) = (e^eps_1 + 1) / (e^eps_1 - 1): one report is exactly Duchi et al.'s mechanism at eps_1, so
Var[t* | t] = B_1^2 - t^2 (|t*| is constant; the rounding adds nothing), and output perturbation costs exactly the
utility of the smaller one-report budget.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import LDPError, Reports
from ldpstream.mechanisms.longitudinal.base import (
    Longitudinal,
    check_gamma,
    check_no_domain,
    check_secrets,
    flip_for,
    flipped_epsilon,
)
from ldpstream.mechanisms.longitudinal.memo import TAG_ALPHA, TAG_PERMANENT, draw_secrets, keyed_uniform
from ldpstream.mechanisms.numeric.base import check_numeric_epsilon, check_unit_values
from ldpstream.mechanisms.numeric.duchi import Duchi, duchi_bound_1d

MAX_BUCKETS = 1 << 20  # grid points are memo keys and int64 codes; far more than any rounding needs


class OneBitMean(Longitudinal, Duchi):
    """1BitMean with alpha-point rounding to s buckets, memoized bits and output perturbation gamma.

    `epsilon` is one report's budget (eps_lifetime when gamma = 0); a report is {"value": float64 (n,)} in +-B_1.

    Examples
    --------
    >>> import numpy as np
    >>> mech = OneBitMean(1.0, buckets=4, gamma=0.1)
    >>> round(mech.epsilon, 4), round(mech.bound, 4)  # one report, and B / (1 - 2 gamma)
    (0.7761, 2.7049)
    >>> secrets = np.full(3, 11, dtype=np.uint64)
    >>> mech.rounded([0.3, 0.3, 0.3], secrets).tolist()  # one device, one value: one grid point, one memo
    [2, 2, 2]
    """

    name: ClassVar[str] = "1bitmean"
    auto_rank: ClassVar[int] = 160
    kind: ClassVar = "numeric"

    def __init__(self, epsilon_lifetime: float, buckets: int = 8, gamma: float = 0.0) -> None:
        lifetime, g = check_numeric_epsilon(epsilon_lifetime), check_gamma(gamma)
        if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or not 1 <= buckets <= MAX_BUCKETS:
            raise LDPError(f"buckets must be an integer in [1, {MAX_BUCKETS}], got {buckets!r}")
        super().__init__(flipped_epsilon(lifetime, g))
        self.epsilon_lifetime, self.gamma, self.buckets = lifetime, g, int(buckets)

    @classmethod
    def with_budgets(cls, epsilon_lifetime: float, epsilon_first: float, domain_size: int | None = None,
                     buckets: int = 8) -> OneBitMean:
        """1BitMean with the output perturbation gamma that makes one report exactly eps_1-LDP (`flip_for`)."""
        check_no_domain(cls.name, domain_size)
        return cls(epsilon_lifetime, buckets, flip_for(epsilon_lifetime, epsilon_first))

    def memo_keys(self, values: np.ndarray, secrets: np.ndarray) -> np.ndarray:
        """The grid point after alpha-point rounding (`rounded`): the bit is memoized per (device, grid point)."""
        return self.rounded(values, secrets)

    def parameters(self) -> dict[str, Any]:
        return {"buckets": self.buckets, "gamma": self.gamma, "bound": self.bound}

    def rounded(self, values: np.ndarray | list[float], secrets: np.ndarray) -> np.ndarray:
        """The memo keys: each device's grid index j in 0..s after alpha-point rounding (int64)."""
        t = check_unit_values(values)
        x = (t + 1.0) * (self.buckets / 2.0)
        low = np.floor(x)
        alpha = keyed_uniform(check_secrets(secrets, t.shape[0]), TAG_ALPHA)
        return np.minimum(low + (x - low + alpha >= 1.0), self.buckets).astype(np.int64)

    def perturb(
        self, values: np.ndarray | float | list[float], rng: np.random.Generator, secrets: np.ndarray | None = None
    ) -> Reports:
        """One report per device; without secrets every row is a new device (`longitudinal.base`)."""
        t = check_unit_values(values)
        keys = draw_secrets(rng, t.shape[0]) if secrets is None else check_secrets(secrets, t.shape[0])
        return {"value": self._respond(t, keys, rng)}

    def _sample(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self._respond(t, draw_secrets(rng, t.shape[0]), rng)

    def _respond(self, t: np.ndarray, secrets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        grid = self.rounded(t, secrets)
        rounded_value = grid * (2.0 / self.buckets) - 1.0
        keep = 0.5 + 0.5 * rounded_value / duchi_bound_1d(self.epsilon_lifetime)  # their Sec. 2.1 at eps_lifetime
        bit = keyed_uniform(secrets, TAG_PERMANENT, grid) < keep
        bit ^= rng.random(t.shape[0]) < self.gamma  # output perturbation, fresh per report
        return np.where(bit, self.bound, -self.bound)

    def memo_parameters(self) -> tuple[tuple[str, float], ...]:
        return (("epsilon_lifetime", self.epsilon_lifetime), ("buckets", self.buckets), ("gamma", self.gamma))

    def __repr__(self) -> str:
        return f"OneBitMean(epsilon_lifetime={self.epsilon_lifetime:g}, buckets={self.buckets}, gamma={self.gamma:g})"
