"""PrivKV (Ye, Hu, Meng, Zheng, S&P 2019; 002 slides 44-45): one key sampled uniformly from the whole domain,
then its (held?, value) perturbed, key and value with separate budgets (one round, without PrivKVM's iterations).

A device samples a key j uniformly from the d keys (public: the report names it). If it holds j with value v, it
discretizes v to v* = +-1 (E[v*] = v) and keeps "held" with probability p1 = e^eps1 / (e^eps1 + 1), reporting v*
kept with probability p2 = e^eps2 / (e^eps2 + 1) (else -v*), or reports "not held"; if it does not hold j it reports
"not held" with probability p1, else "held" with a fair +-1 value. The report is {"key": j, "value": 1, -1, or 0
for "not held"}. PrivKV splits eps = eps1 + eps2 evenly (sequential composition), as here.

Privacy: for the sampled key, a report's probability is p1 p2, p1 (1 - p2), 1 - p1 (held) or p1, (1 - p1)/2 (not
held), so the exact epsilon is max(eps1, eps2, ln(p1 p2 / ((1 - p1)/2))) = max(eps2, eps1 + ln(2 e^eps2 /
(e^eps2 + 1))): below eps1 + eps2 (derived here and checked by enumeration in the tests). The even split spends
eps/2 + ln(2 e^(eps/2) / (e^(eps/2) + 1)) < eps: PrivKV leaves part of its budget unused, which PCKV's allocation
(`ldpstream.mechanisms.keyvalue.pckv`) reclaims.

Estimators (`ldpstream.mechanisms.keyvalue.base`): with X = 1{key = k and value != 0}, Z = 1{key = k}, Y = 1{key = k}
value, O = Z, b = 1 - p1, rho = 1/d, G_f = 2 p1 - 1, G_s = p1 (2 p2 - 1): f_hat = d (sum X - (1 - p1) sum Z) / (n (2 p1
- 1)) and s_hat = d sum Y / (n p1 (2 p2 - 1)) (dividing by n rather than by the number who sampled k keeps each device's
term additive and the variance exact; PrivKV divides by the latter). With r = 1{holds k} / d: E[(X - b Z)^2] = p1 (1 -
p1)/d + r (p1^3 + (1 - p1)^3 - p1 (1 - p1)), E[Y^2] = (1 - p1)/d + r (2 p1 - 1), E[(X - b Z) Y] = p1 E[Y].
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, Reports, ReportSchema
from ldpstream.mechanisms.keyvalue.base import EMPTY, KeyValueMechanism, discretize, flip


class PrivKV(KeyValueMechanism):
    """PrivKV: {"key": uint32 (n,) the sampled key, "value": int8 (n,) in {-1, 0, 1}} (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from ldpstream.mechanisms.keyvalue.base import pairs_array
    >>> mech = PrivKV(2.0, 4)
    >>> reports = mech.perturb(pairs_array([{0: 0.5, 2: -0.25}, {1: 1.0}]), np.random.default_rng(0))
    >>> sorted(reports), mech.accumulate(reports).shape
    (['key', 'value'], (9,))
    >>> mech.exact_epsilon() < 2.0
    True
    """

    name: ClassVar[str] = "privkv"
    auto_rank: ClassVar[int] = 30

    @property
    def epsilon_key(self) -> float:
        """eps1 = eps / 2."""
        return self.epsilon / 2

    @property
    def epsilon_value(self) -> float:
        """eps2 = eps / 2."""
        return self.epsilon / 2

    @property
    def p1(self) -> float:
        return math.exp(self.epsilon_key) / (math.exp(self.epsilon_key) + 1)

    @property
    def p2(self) -> float:
        return math.exp(self.epsilon_value) / (math.exp(self.epsilon_value) + 1)

    @property
    def holder_rate(self) -> float:
        return 1.0 / self.domain_size

    @property
    def frequency_gain(self) -> float:
        return 2 * self.p1 - 1

    @property
    def value_gain(self) -> float:
        return self.p1 * (2 * self.p2 - 1)

    def exact_epsilon(self) -> float:
        """max(eps2, eps1 + ln(2 p2)): the epsilon a report provides, below the eps1 + eps2 it is charged."""
        return max(self.epsilon_value, self.epsilon_key + math.log(2 * self.p2))

    def parameters(self) -> dict[str, Any]:
        """The mechanism's parameters by name."""
        return {"epsilon_key": self.epsilon_key, "epsilon_value": self.epsilon_value, "p1": self.p1, "p2": self.p2}

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("key", "uint32", 0, self.domain_size - 1),
                             Column("value", "int8", -1, 1, allowed=(-1.0, 0.0, 1.0))))

    def selection(self, keys: np.ndarray) -> np.ndarray:
        held = np.zeros((keys.shape[0], self.domain_size))
        rows, slots = np.nonzero(keys != EMPTY)
        held[rows, keys[rows, slots]] = 1.0
        return held / self.domain_size

    def per_device_moments(self, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p1, d = self.p1, self.domain_size
        xx = p1 * (1 - p1) / d + r * (p1**3 + (1 - p1) ** 3 - p1 * (1 - p1))
        return xx, (1 - p1) / d + r * (2 * p1 - 1), p1 * r * self.value_gain * v

    def _sample(self, keys: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        n: int = keys.shape[0]
        sampled = rng.integers(0, self.domain_size, n)
        match = keys == sampled[:, None]
        held = match.any(axis=1)
        vstar = discretize(values[np.arange(n), match.argmax(axis=1)] * held, rng)
        says_held = (rng.random(n) < self.p1) == held
        fair = np.where(rng.random(n) < 0.5, 1, -1).astype(np.int8)
        value = np.where(held, flip(vstar, self.p2, rng), fair)
        return {"key": sampled.astype(np.uint32), "value": np.where(says_held, value, 0).astype(np.int8)}

    def centered_sums(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(reports["key"], dtype=np.intp)
        value = np.asarray(reports["value"], dtype=np.float64)
        d = self.domain_size
        sampled = np.bincount(key, minlength=d)
        support = np.bincount(key, weights=value != 0, minlength=d) - (1 - self.p1) * sampled
        return support, np.bincount(key, weights=value, minlength=d)

    def per_device_terms(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(reports["key"], dtype=np.int64)
        value = np.asarray(reports["value"], dtype=np.float64)[:, None]
        hit = key[:, None] == np.arange(self.domain_size)
        return hit * ((value != 0) - (1 - self.p1)), hit * value

    def _log_pmf_of_set(self, reports: Reports, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        key = np.asarray(reports["key"], dtype=np.int64)
        y = np.asarray(reports["value"], dtype=np.int64)
        holds = np.zeros(self.domain_size, dtype=bool)
        holds[keys] = True
        dense = np.zeros(self.domain_size)
        dense[keys] = values
        h, v = holds[key], dense[key]
        p1, p2 = self.p1, self.p2
        sign = np.where(y == 0, 1, y)
        p_same = (1 + sign * v) / 2  # Pr[v* = the reported sign]
        held_value = p1 * (p2 * p_same + (1 - p2) * (1 - p_same))
        prob = np.where(h, np.where(y == 0, 1 - p1, held_value), np.where(y == 0, p1, (1 - p1) / 2))
        return np.log(prob / self.domain_size)
