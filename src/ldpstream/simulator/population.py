"""A synthetic device population with known statistics (000 Sec. VI), generated in vectorised chunks.

Numeric attributes are drawn on [-1, 1] and mapped linearly onto the attribute's [lo, hi]:
- "gaussian": N(mu, 1/4^2) truncated to [-1, 1] (000 Sec. VI-A: standard deviation 1/4, values outside discarded),
  drawn exactly by the inverse CDF restricted to [-1, 1]; mu per attribute from the seed, uniform in [-1/2, 1/2];
- "uniform": uniform on [-1, 1];
- "power_law": density proportional to (x + 2)^-10 on [-1, 1] (000 Sec. VI-A), by its inverse CDF
  F(x) = (1 - (x + 2)^-9) / (1 - 3^-9).
String attributes are Zipf(`zipf_exponent`) over `distinct` random words (`ldpstream.simulator.strings`).
Categorical attributes are Zipf over the listed values: P(value i) proportional to (i + 1)^-s, s = `zipf_exponent`.
Keyvalue attributes: a device holds key i independently with probability min(0.95, P_i * pairs_per_device), P the
Zipf probabilities over the keys, and its value for key i is the truncated gaussian above with a mean per key (from
the seed), mapped onto the range; the records are pairs arrays (n, keys held at most, 2), empty slots -1.

`PopulationTruth` accumulates the exact statistics of the records drawn (means in the attribute's units,
frequencies = counts / devices), which is what the estimates are checked against.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from scipy.special import ndtr, ndtri

from ldpstream.contract.spec import (
    CategoricalAttribute,
    CollectionSpec,
    KeyValueAttribute,
    NumericAttribute,
    StringAttribute,
)

GAUSSIAN_SD = 0.25
MAX_HOLD = 0.95  # the largest probability that a simulated device holds a key
GAUSSIAN_MU_RANGE = 0.5
POWER_LAW_EXPONENT = 10.0
LETTERS = "abcdefghijklmnopqrstuvwxyz"  # simulated words of a string attribute without an alphabet

Records = dict[str, np.ndarray]


def random_words(distinct: int, rng: np.random.Generator, alphabet: str = LETTERS, min_length: int = 3,
                 max_length: int = 8) -> np.ndarray:
    """`distinct` distinct random words over `alphabet`, lengths uniform in [min_length, max_length], in the order
    drawn (S<max_length> bytes; vectorised, drawing extra and dropping repeats)."""
    symbols = np.frombuffer(alphabet.encode("ascii"), dtype=np.uint8)
    words = np.zeros(0, dtype=f"S{max_length}")
    while words.shape[0] < distinct:
        want = 2 * (distinct - words.shape[0]) + 16
        lengths = rng.integers(min_length, max_length + 1, size=want)
        rows = symbols[rng.integers(0, symbols.shape[0], size=(want, max_length))]
        rows[np.arange(max_length)[None, :] >= lengths[:, None]] = 0
        words = np.concatenate([words, np.ascontiguousarray(rows).view(f"S{max_length}").ravel()])
        _, first = np.unique(words, return_index=True)
        words = words[np.sort(first)]
    return words[:distinct]


def truncated_gaussian(mu: float, sd: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """N(mu, sd^2) conditioned on [-1, 1], by the inverse CDF on [Phi(a), Phi(b)]."""
    lo, hi = ndtr((-1.0 - mu) / sd), ndtr((1.0 - mu) / sd)
    return np.clip(mu + sd * ndtri(rng.uniform(lo, hi, n)), -1.0, 1.0)


def power_law(n: int, rng: np.random.Generator, exponent: float = POWER_LAW_EXPONENT) -> np.ndarray:
    """Density proportional to (x + 2)^-exponent on [-1, 1], by the inverse CDF."""
    m = exponent - 1.0
    u = rng.uniform(0.0, 1.0, n)
    return np.clip((1.0 - u * (1.0 - 3.0**-m)) ** (-1.0 / m) - 2.0, -1.0, 1.0)


def zipf_probabilities(size: int, exponent: float) -> np.ndarray:
    """P(i) proportional to (i + 1)^-exponent for i = 0..size-1.

    Examples
    --------
    >>> zipf_probabilities(3, 1.0).round(4).tolist()
    [0.5455, 0.2727, 0.1818]
    """
    weights = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


class Population:
    """The generator of one seeded population for a spec: per-attribute parameters fixed at construction."""

    def __init__(self, spec: CollectionSpec, seed: int) -> None:
        self.spec = spec
        params = np.random.default_rng([seed, 0x5EED])
        self.gaussian_mu = {a.name: float(params.uniform(-GAUSSIAN_MU_RANGE, GAUSSIAN_MU_RANGE))
                            for a in spec.attributes if isinstance(a, NumericAttribute)}
        self.zipf = {a.name: zipf_probabilities(len(a.values), a.zipf_exponent)
                     for a in spec.attributes if isinstance(a, CategoricalAttribute)}
        self.hold = {a.name: np.minimum(MAX_HOLD, a.pairs_per_device * zipf_probabilities(a.domain_size,
                                                                                          a.zipf_exponent))
                     for a in spec.attributes if isinstance(a, KeyValueAttribute)}
        self.key_mu = {name: params.uniform(-GAUSSIAN_MU_RANGE, GAUSSIAN_MU_RANGE, len(hold))
                       for name, hold in self.hold.items()}
        self.words = {a.name: random_words(a.distinct, np.random.default_rng([seed, i]), a.alphabet or LETTERS, 1,
                                           a.max_length)
                      for i, a in enumerate(spec.attributes) if isinstance(a, StringAttribute)}

    def sample(self, n: int, rng: np.random.Generator) -> Records:
        """True records of n devices: numeric values in the attribute's range, categorical value codes."""
        records: Records = {}
        for a in self.spec.attributes:
            if isinstance(a, NumericAttribute):
                lo, hi = a.range
                records[a.name] = lo + (self._unit(a, n, rng) + 1.0) * ((hi - lo) / 2.0)
            elif isinstance(a, KeyValueAttribute):
                records[a.name] = self._pairs(a, n, rng)
            elif isinstance(a, StringAttribute):  # words by Zipf rank
                words = self.words[a.name]
                records[a.name] = words[rng.choice(len(words), size=n, p=zipf_probabilities(len(words),
                                                                                           a.zipf_exponent))]
            else:
                records[a.name] = rng.choice(len(a.values), size=n, p=self.zipf[a.name]).astype(np.int64)
        return records

    def _pairs(self, a: KeyValueAttribute, n: int, rng: np.random.Generator) -> np.ndarray:
        """A pairs array of n devices (module docstring), the held keys first in each row."""
        hold, mu = self.hold[a.name], self.key_mu[a.name]
        held = rng.random((n, len(hold))) < hold
        lo, hi = a.range
        unit = np.clip(mu + GAUSSIAN_SD * rng.standard_normal(held.shape), -1.0, 1.0)
        values = lo + (unit + 1.0) * ((hi - lo) / 2.0)
        order = np.argsort(~held, axis=1, kind="stable")[:, : max(1, int(held.sum(axis=1).max(initial=0)))]
        kept = np.take_along_axis(held, order, axis=1)
        return np.stack([np.where(kept, order, -1), np.where(kept, np.take_along_axis(values, order, axis=1), 0.0)],
                        axis=2).astype(np.float64)

    def _unit(self, a: NumericAttribute, n: int, rng: np.random.Generator) -> np.ndarray:
        if a.distribution == "gaussian":
            return truncated_gaussian(self.gaussian_mu[a.name], GAUSSIAN_SD, n, rng)
        if a.distribution == "uniform":
            return rng.uniform(-1.0, 1.0, n)
        return power_law(n, rng)


class PopulationTruth:
    """Exact statistics of the records seen so far: sums of numeric values, counts of categorical codes."""

    def __init__(self, spec: CollectionSpec) -> None:
        self.spec = spec
        self.devices = 0
        self._sums: dict[str, list[float]] = {a.name: [] for a in spec.attributes if isinstance(a, NumericAttribute)}
        self._counts = {a.name: np.zeros(len(a.values), dtype=np.int64)
                        for a in spec.attributes if isinstance(a, CategoricalAttribute)}
        self._holders = {a.name: np.zeros(a.domain_size, dtype=np.int64)
                         for a in spec.attributes if isinstance(a, KeyValueAttribute)}
        self._key_sums = {name: np.zeros(len(c)) for name, c in self._holders.items()}
        self._words: dict[str, Counter[str]] = {a.name: Counter() for a in spec.attributes
                                                if isinstance(a, StringAttribute)}

    def add(self, records: Records) -> None:
        n = len(next(iter(records.values())))
        self.devices += n
        for name, partial in self._sums.items():
            partial.append(float(np.sum(records[name])))  # pairwise per chunk, fsum across chunks
        for name, counts in self._counts.items():
            counts += np.bincount(records[name], minlength=len(counts))
        for name, holders in self._holders.items():
            keys, values = records[name][:, :, 0], records[name][:, :, 1]
            held = keys >= 0
            holders += np.bincount(keys[held].astype(np.intp), minlength=len(holders))
            self._key_sums[name] += np.bincount(keys[held].astype(np.intp), weights=values[held],
                                                minlength=len(holders))
        for name, words in self._words.items():
            distinct, seen = np.unique(np.asarray(records[name]).astype(bytes), return_counts=True)
            words.update(dict(zip((w.decode() for w in distinct.tolist()), seen.tolist(), strict=True)))

    def to_dict(self) -> dict[str, object]:
        """{"devices": N, "attributes": {NAME: {"mean": x} | {"frequencies": {VALUE: f}} | {"frequencies": {KEY: f},
        "means": {KEY: mean of the holders' values}}}}."""
        attributes: dict[str, object] = {}
        for a in self.spec.attributes:
            if isinstance(a, NumericAttribute):
                attributes[a.name] = {"mean": math.fsum(self._sums[a.name]) / self.devices if self.devices else None}
            elif isinstance(a, KeyValueAttribute):
                holders, sums = self._holders[a.name], self._key_sums[a.name]
                attributes[a.name] = {
                    "frequencies": {k: (int(c) / self.devices if self.devices else None)
                                    for k, c in zip(a.labels, holders, strict=True)},
                    "means": {k: (float(s) / int(c) if c else None)
                              for k, s, c in zip(a.labels, sums, holders, strict=True)}}
            elif isinstance(a, StringAttribute):  # the true top list, twice the attribute's `top` long
                attributes[a.name] = {"frequencies": {w: c / self.devices
                                                      for w, c in self._words[a.name].most_common(2 * a.top)}}
            else:
                counts = self._counts[a.name]
                attributes[a.name] = {"frequencies": {v: (int(c) / self.devices if self.devices else None)
                                                      for v, c in zip(a.values, counts, strict=True)}}
        return {"devices": self.devices, "attributes": attributes}
