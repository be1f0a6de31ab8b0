"""PCKV (Gu, Li, Cheng, Xiong, Cao, USENIX Security 2020): padding-and-sampling, then correlated perturbation of the
sampled key and its value, by unary encoding (PCKV-UE) or generalized randomized response (PCKV-GRR).

Padding-and-sampling: a device with s pairs adds max(0, l - s) dummy pairs (keys d, d + 1, ..., value 0) and
reports one of its max(s, l) pairs, uniformly: a holder of key k reports about (k, v) with probability
r = 1/max(s, l), which is 1/l when s <= l (the estimators multiply by l: unbiased exactly then; a device with more
than l pairs makes its keys' frequencies too small by the factor l/s, as in the paper). The value is discretized
to v* = +-1 with E[v*] = v (`discretize`).

Correlated perturbation over the d' = d + l keys (dummies included), with a = Pr[the report keeps the sampled key],
b = Pr[it names a given other key], p = Pr[a kept key keeps v*]; an unrelated key's value is a fair +-1:
- PCKV-UE: a vector y in {-1, 0, 1}^d: y_k = v* w.p. a p, -v* w.p. a (1 - p), 0 w.p. 1 - a at the sampled key k;
  every other entry +-1 w.p. b/2 each, 0 w.p. 1 - b; a = 1/2, b = 1 / (e^eps1 + 1). The dummies' entries are
  dropped before sending (post-processing: they carry nothing the estimator uses).
- PCKV-GRR: a pair (k', v'): k' = k w.p. a = e^eps1 / (e^eps1 + d' - 1) with v' = v* w.p. p, else -v*; otherwise
  k' is one of the other d' - 1 keys uniformly (b = 1 / (e^eps1 + d' - 1) each) with v' a fair +-1.

Privacy, both (PCKV's correlated composition; derived here): for one sampled pair, a report's probability is a p,
a (1 - p) or b/2 (GRR), or those factors on two entries (UE), so the largest ratio between two inputs is
max(p / (1 - p), 2 a p (1 - b) / (b (1 - a))) (UE) or max(p / (1 - p), 2 a p / b) (GRR); both are
max(e^eps2, 2 e^(eps1 + eps2) / (e^eps2 + 1)). Padding-and-sampling is a mixture over pairs, which keeps the bound.
Budget allocation: eps2 = eps and eps1 = ln((e^eps + 1) / 2) reach it exactly (2 e^(eps1 + eps) / (e^eps + 1) =
e^eps), so the value is perturbed at the full eps and the key at eps1 instead of the eps/2 of a split budget.
(PCKV tunes PCKV-GRR's split further for large d'; this module keeps the one allocation for both.)

Estimators (`ldpstream.mechanisms.keyvalue.base`): X = 1{y_k != 0} (UE) or 1{k' = k} (GRR), Y = y_k or 1{k' = k} v', O =
1, rho = 1/l, G_f = a - b, G_s = a (2 p - 1): f_hat = l (sum X / n - b) / (a - b), s_hat = l sum Y / (n a (2p - 1)).
With pi = b + r (a - b) = Pr[X = 1]: E[(X - b)^2] = b^2 + pi (1 - 2 b), E[Y^2] = pi, E[(X - b) Y] = (1 - b) E[Y].
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, ClassVar

import numpy as np

from ldpstream.mechanisms.base import Column, LDPError, Reports, ReportSchema
from ldpstream.mechanisms.frequency.base import randomized_response_from_uniform
from ldpstream.mechanisms.keyvalue.base import (
    EMPTY,
    KeyValueMechanism,
    check_padding,
    discretize,
    discretized_probability,
    flip,
)


def pad_and_sample(keys: np.ndarray, values: np.ndarray, padding: int, domain_size: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(key, value) per device: one of its pairs padded to at least `padding` with dummies (keys d, d + 1, ...,
    value 0), uniformly; vectorised over a (n, slots) batch with empty slots -1.

    Examples
    --------
    >>> import numpy as np
    >>> keys, values = np.array([[2, -1], [-1, -1]]), np.array([[0.5, 0.0], [0.0, 0.0]])
    >>> key, value = pad_and_sample(keys, values, 1, 3, np.random.default_rng(0))
    >>> key.tolist(), value.tolist()
    ([2, 3], [0.5, 0.0])
    """
    n = keys.shape[0]
    held = keys != EMPTY
    count = held.sum(axis=1)
    size = np.maximum(count, padding)
    pick = np.minimum(np.floor(rng.random(n) * size).astype(np.int64), size - 1)
    rank = np.cumsum(held, axis=1) - 1
    slot = (held & (rank == pick[:, None])).argmax(axis=1)
    rows = np.arange(n)
    real = pick < count
    return (np.where(real, keys[rows, slot], domain_size + pick - count),
            np.where(real, values[rows, slot], 0.0))


class PCKV(KeyValueMechanism):
    """What PCKV-UE and PCKV-GRR share: the padding length l, the budget allocation, the estimator constants."""

    takes_padding: ClassVar[bool] = True

    def __init__(self, epsilon: float, domain_size: int, padding: int = 1) -> None:
        super().__init__(epsilon, domain_size)
        self.padding = check_padding(padding)
        if self.domain_size + self.padding < 2:
            raise LDPError("PCKV needs at least two keys with the dummies (d + l >= 2)")

    @property
    def epsilon_key(self) -> float:
        """eps1 = ln((e^eps + 1) / 2): the key's budget (module docstring)."""
        return math.log((math.exp(self.epsilon) + 1) / 2)

    @property
    def epsilon_value(self) -> float:
        """eps2 = eps: the value's budget."""
        return self.epsilon

    @property
    def keys_with_dummies(self) -> int:
        """d' = d + l."""
        return self.domain_size + self.padding

    @property
    def p(self) -> float:
        """Pr[a kept key keeps its value v*]."""
        return math.exp(self.epsilon_value) / (math.exp(self.epsilon_value) + 1)

    @property
    @abstractmethod
    def a(self) -> float:
        """Pr[the report keeps the sampled key]."""

    @property
    @abstractmethod
    def b(self) -> float:
        """Pr[the report names a given other key]."""

    @property
    def holder_rate(self) -> float:
        return 1.0 / self.padding

    @property
    def frequency_gain(self) -> float:
        return self.a - self.b

    @property
    def value_gain(self) -> float:
        return self.a * (2 * self.p - 1)

    def exact_epsilon(self) -> float:
        """max(eps2, eps1 + ln(2 e^eps2 / (e^eps2 + 1))): the epsilon the report provides (module docstring)."""
        return max(self.epsilon_value, self.epsilon_key + math.log(2 * self.p))

    def parameters(self) -> dict[str, Any]:
        """The mechanism's parameters by name."""
        return {"padding": self.padding, "epsilon_key": self.epsilon_key, "epsilon_value": self.epsilon_value,
                "a": self.a, "b": self.b, "p": self.p}

    def selection(self, keys: np.ndarray) -> np.ndarray:
        held = keys != EMPTY
        r = np.zeros((keys.shape[0], self.domain_size))
        share = 1.0 / np.maximum(held.sum(axis=1), self.padding)
        rows, slots = np.nonzero(held)
        r[rows, keys[rows, slots]] = share[rows]
        return r

    def per_device_moments(self, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = self.a, self.b
        pi = b + r * (a - b)
        return b**2 + pi * (1 - 2 * b), pi, (1 - b) * r * self.value_gain * v

    def _options(self, keys: np.ndarray, values: np.ndarray) -> list[tuple[float, int, float]]:
        """(probability, key, value) of each pair padding-and-sampling can pick for one set (dummies included)."""
        size = max(len(keys), self.padding)
        dummies = [(1 / size, self.domain_size + i, 0.0) for i in range(self.padding - len(keys))]
        return [(1 / size, int(k), float(v)) for k, v in zip(keys, values, strict=True)] + dummies

    def _log_pmf_of_set(self, reports: Reports, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        total: np.ndarray | float = 0.0
        for weight, key, value in self._options(keys, values):  # one set's few pairs; vectorised over reports
            for sign in (1, -1):
                total = total + weight * float(discretized_probability(value, sign)) * self._pair_pmf(
                    reports, key, sign)
        return np.log(total)

    @abstractmethod
    def _pair_pmf(self, reports: Reports, key: int, sign: int) -> np.ndarray:
        """(n,) Pr[report | the sampled pair is (key, v* = sign)]."""


class PCKVUE(PCKV):
    """PCKV-UE: a ternary vector per device, {"bits": int8 (n, d)} in {-1, 0, 1} (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from ldpstream.mechanisms.keyvalue.base import pairs_array
    >>> mech = PCKVUE(2.0, 4, padding=2)
    >>> reports = mech.perturb(pairs_array([{0: 0.5, 2: -0.25}, {1: 1.0}]), np.random.default_rng(0))
    >>> reports["bits"].shape, mech.accumulate(reports).shape
    ((2, 4), (9,))
    >>> round(mech.exact_epsilon(), 12)
    2.0
    """

    name: ClassVar[str] = "pckv-ue"
    auto_rank: ClassVar[int] = 20

    @property
    def a(self) -> float:
        return 0.5

    @property
    def b(self) -> float:
        return 1.0 / (math.exp(self.epsilon_key) + 1)

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("bits", "int8", -1, 1, width=self.domain_size),))

    def _sample(self, keys: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        n, d = keys.shape[0], self.domain_size
        key, value = pad_and_sample(keys, values, self.padding, d, rng)
        vstar = discretize(value, rng)
        u = rng.random((n, d))
        bits = np.where(u < self.b / 2, 1, np.where(u < self.b, -1, 0)).astype(np.int8)
        rows = np.flatnonzero(key < d)  # a dummy's entry is not sent
        w, sign = rng.random(rows.size), vstar[rows]
        a, ap = self.a, self.a * self.p
        bits[rows, key[rows]] = np.where(w < ap, sign, np.where(w < a, -sign, 0))
        return {"bits": bits}

    def centered_sums(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        bits = np.asarray(reports["bits"])
        support = np.count_nonzero(bits, axis=0).astype(np.float64) - bits.shape[0] * self.b
        return support, bits.sum(axis=0, dtype=np.int64).astype(np.float64)

    def per_device_terms(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        bits = np.asarray(reports["bits"]).astype(np.float64)
        return (bits != 0) - self.b, bits

    def _pair_pmf(self, reports: Reports, key: int, sign: int) -> np.ndarray:
        bits = np.asarray(reports["bits"])
        other = np.where(bits == 0, 1 - self.b, self.b / 2)
        if key >= self.domain_size:
            return other.prod(axis=1)
        own = np.select([bits[:, key] == sign, bits[:, key] == -sign], [self.a * self.p, self.a * (1 - self.p)],
                        1 - self.a)
        return np.delete(other, key, axis=1).prod(axis=1) * own


class PCKVGRR(PCKV):
    """PCKV-GRR: a (key, value) pair per device, {"key": uint32 (n,) in 0..d+l-1, "value": int8 (n,) in {-1, 1}}.

    Examples
    --------
    >>> import numpy as np
    >>> from ldpstream.mechanisms.keyvalue.base import pairs_array
    >>> mech = PCKVGRR(1.0, 3, padding=2)
    >>> reports = mech.perturb(pairs_array([{0: 0.5}, {}, {1: -1.0, 2: 0.0}]), np.random.default_rng(0))
    >>> sorted(reports), mech.accumulate(reports).shape
    (['key', 'value'], (7,))
    """

    name: ClassVar[str] = "pckv-grr"
    auto_rank: ClassVar[int] = 10

    @property
    def a(self) -> float:
        e1 = math.exp(self.epsilon_key)
        return e1 / (e1 + self.keys_with_dummies - 1)

    @property
    def b(self) -> float:
        return 1.0 / (math.exp(self.epsilon_key) + self.keys_with_dummies - 1)

    @property
    def schema(self) -> ReportSchema:
        return ReportSchema((Column("key", "uint32", 0, self.keys_with_dummies - 1),
                             Column("value", "int8", -1, 1, allowed=(-1.0, 1.0))))

    def _sample(self, keys: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        n: int = keys.shape[0]
        key, value = pad_and_sample(keys, values, self.padding, self.domain_size, rng)
        vstar = discretize(value, rng)
        u = rng.random(n)
        kept = u < self.a  # randomized_response_from_uniform keeps the key exactly when u < a
        out_key = randomized_response_from_uniform(key, self.keys_with_dummies, self.a, u)
        fair = np.where(rng.random(n) < 0.5, 1, -1).astype(np.int8)
        return {"key": out_key, "value": np.where(kept, flip(vstar, self.p, rng), fair)}

    def centered_sums(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(reports["key"], dtype=np.intp)
        value = np.asarray(reports["value"], dtype=np.float64)
        d, size = self.domain_size, self.keys_with_dummies
        support = np.bincount(key, minlength=size)[:d] - key.shape[0] * self.b
        return support.astype(np.float64), np.bincount(key, weights=value, minlength=size)[:d]

    def per_device_terms(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(reports["key"], dtype=np.int64)
        hit = key[:, None] == np.arange(self.domain_size)
        return hit - self.b, hit * np.asarray(reports["value"], dtype=np.float64)[:, None]

    def _pair_pmf(self, reports: Reports, key: int, sign: int) -> np.ndarray:
        same_key = np.asarray(reports["key"], dtype=np.int64) == key
        same_value = np.asarray(reports["value"]) == sign
        return np.where(same_key, self.a * np.where(same_value, self.p, 1 - self.p), self.b / 2)
