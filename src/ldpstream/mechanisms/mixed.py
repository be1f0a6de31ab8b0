"""Mixed records: d numeric and categorical attributes per device, k of them sampled (000 Sec. IV-C).

API (what the pipeline calls)::

    collector = MixedCollector([NumericAttribute("age", 18, 90), CategoricalAttribute("os", 4)], epsilon=2.0)
    batch = collector.perturb({"age": ages, "os": codes}, rng)   # columns of n devices' true values
    batch.n                  # devices in the batch
    batch.rows["age"]        # int64 row indices of the devices that sampled "age"
    batch.reports["age"]     # those devices' reports: the attribute mechanism's columnar reports (same order)
    stats = collector.accumulate(batch)   # flat float64 vector, additive across batches, length stats_size
    collector.estimate(stats)             # {"age": Estimate(mean on [18, 90]), "os": Estimate(frequencies)}

Each device samples k of the d attributes uniformly without replacement, k = max(1, min(d, floor(eps/2.5))) (000 Eq. 12)
unless given; k = 1 is Harmony's one attribute per user (001 Sec. 3.2); k = d is the budget-splitting baseline
(`MixedCollector.budget_split`: every attribute at eps/d, no sampling). Each sampled attribute is perturbed at eps/k: a
numeric one by a `ldpstream.mechanisms.numeric` mechanism on [-1, 1] after `RangeScaler` ("auto" picks the lowest
worst-case variance for this d and k, `ldpstream.mechanisms.numeric.auto.choose_sampled`), a categorical one by a
frequency oracle from `ldpstream.mechanisms.registry` (OUE by default, as in 000 Sec. VI).

Statistics: [N] then, per attribute in order, [n_j, the attribute mechanism's statistics], where N counts every
device and n_j those that sampled attribute j (`stats_slices` gives each block).

Estimates (unbiased; 000 Sec. IV-C): with s = d/k, the mean of t_j over all N devices is s * sum(t*_j) / N, and
a frequency is s * n_j * f_j / N, where f_j is the oracle's unbiased frequency among the n_j reports. Each device
includes attribute j independently with probability k/d, so with m2 = mean over devices of t^2 (numeric) or of
the indicator (categorical, = the frequency),

    Var = (s n_j / N)^2 Var[f_j or mean_j | sample] + (s - 1) m2 / N,

whose expectation is 000 Lemma 6's [(d/k)(Var_1(t) + t^2) - t^2] / N averaged over devices. m2 is a plug-in:
`second_moment_plugin` for numeric attributes, the clipped frequency estimate for categorical ones. An attribute
that no device sampled yet estimates 0 (the unbiased estimator's value) with the worst-case sampling error.

Key-value attributes (`KeyValueAttribute`): a device's column is its set of (key, value) pairs (a pairs array,
`ldpstream.mechanisms.keyvalue.base`), reported by PrivKV or PCKV at eps/k; the estimate is (2, d): the keys'
frequencies, scaled as a categorical attribute's, and their mean values, a ratio that the d/k scaling leaves unchanged
(`_keyvalue_estimate`).

A numeric attribute may name a distribution mechanism (`ldpstream.mechanisms.distribution`: "sw"): its estimate is the
mean as above, and `distributions` gives its distribution on [lo, hi] from the n_j devices that reported it. The k
sampled attributes are chosen independently of the data, so those devices are a random sample of all of them: the
distribution and its standard errors are those of the population they are drawn from (the standard errors count the
LDP noise and the sampling of n_j devices together, as the reports of n_j independent draws).

A string attribute (`StringAttribute`) is reported by a heavy-hitter tree of `ldpstream.mechanisms.open_domain`; its
estimate is the tree's top list (`HeavyHitters`), each frequency scaled and its variance completed as a categorical
one's.

Privacy: the sampled set does not depend on the data, and each of the k reports is (eps/k)-LDP, so a device's
reports are eps-LDP by sequential composition (000 Lemma 4; Harmony's argument for k = 1, 001 Sec. 3.2).

Over time (`epsilon_lifetime`, a device reporting every window): every attribute is reported by a memoized mechanism of
`ldpstream.mechanisms.longitudinal` built for (eps_inf / k, eps / k) ("auto": `ldpstream.mechanisms.longitudinal.auto`),
perturbing with the devices' collection secrets (`perturb(records, rng, secrets)`); each attribute reads its own secret
(`ldpstream.mechanisms.longitudinal.memo.attribute_secrets`), and the k attributes a device reports are fixed by its
secret too, so that it reports the same k in every window. Then one report is eps-LDP as above, and all the reports of a
device whose record stays the same are eps_inf-LDP together (k memos of eps_inf / k each, whatever the number of
reports); each further distinct value of an attribute costs another eps_inf / k (`memo_keys` says which memo each report
reads, so the device's ledger can charge it once). Within one window the fixed sample is still each device including
attribute j with probability k/d, independently across devices, so the estimator and its variance above hold per window
unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import Estimate, LDPError, Mechanism, Reports, ReportSchema, check_epsilon
from ldpstream.mechanisms.distribution.base import Distribution, DistributionMechanism
from ldpstream.mechanisms.keyvalue.base import EMPTY, KeyValueMechanism, check_pairs
from ldpstream.mechanisms.longitudinal.auto import choose_longitudinal
from ldpstream.mechanisms.longitudinal.base import Longitudinal, check_secrets
from ldpstream.mechanisms.longitudinal.memo import TAG_ATTRIBUTE_SAMPLE, attribute_secrets, keyed_uniform, name_key
from ldpstream.mechanisms.multidim import check_dims, sampled_attributes
from ldpstream.mechanisms.numeric.auto import choose_sampled
from ldpstream.mechanisms.numeric.base import NumericMechanism, second_moment_plugin
from ldpstream.mechanisms.numeric.scaling import RangeScaler
from ldpstream.mechanisms.open_domain.strings import StringDomain
from ldpstream.mechanisms.open_domain.tree import HeavyHitters, LevelCap, choose_heavy_hitters
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism


def attribute_block(sampled: float, stats: np.ndarray) -> np.ndarray:
    """An attribute's block of the collector's statistics: [n_j, the attribute mechanism's statistics]."""
    return np.concatenate([[float(sampled)], np.asarray(stats, dtype=np.float64)])


def block_size(mechanism: Mechanism) -> int:
    """The length of an attribute's block of statistics when `mechanism` reports it."""
    return 1 + mechanism.stats_size


def joined_stats(devices: float, blocks: Sequence[np.ndarray]) -> np.ndarray:
    """The collector's statistics: [N, then each attribute's block in order].

    Examples
    --------
    >>> joined_stats(3, [attribute_block(2, np.array([0.5, 1.0]))]).tolist()
    [3.0, 2.0, 0.5, 1.0]
    """
    return np.concatenate([[float(devices)], *blocks])


@dataclass(frozen=True)
class NumericAttribute:
    """A numeric attribute with values in [lo, hi], perturbed by a numeric mechanism name or "auto"."""

    name: str
    lo: float
    hi: float
    mechanism: str = "auto"
    parameters: Mapping[str, int | float] = field(default_factory=dict)  # a memoized mechanism's (`_memoized`)


@dataclass(frozen=True)
class CategoricalAttribute:
    """A categorical attribute with codes 0..domain-1, perturbed by a frequency oracle name.

    `mechanism`, when given, is used instead (built at the attribute's eps/k), e.g. a `FactorizationMechanism`
    whose estimate is the answers to a linear-query workload over the codes rather than the frequencies.
    """

    name: str
    domain: int
    oracle: str = "oue"
    mechanism: Mechanism | None = None
    parameters: Mapping[str, int | float] = field(default_factory=dict)  # a memoized oracle's (`_memoized`)


@dataclass(frozen=True)
class KeyValueAttribute:
    """Key-value pairs over `domain` keys with values in [lo, hi], reported by a `ldpstream.mechanisms.keyvalue`
    mechanism name or
    "auto" (`choose_keyvalue`); a device's column is a pairs array (n, slots, 2) with values on [lo, hi]."""

    name: str
    domain: int
    lo: float
    hi: float
    mechanism: str = "auto"
    padding: int = 1


@dataclass(frozen=True)
class StringAttribute:
    """A string attribute over an open domain, estimated as its `top` heavy hitters by a prefix tree of
    `ldpstream.mechanisms.open_domain` ("auto": `choose_heavy_hitters`), whose public hashes `seed` fixes."""

    name: str
    domain: StringDomain
    mechanism: str = "auto"
    top: int = 20
    seed: int = 0


Attribute = NumericAttribute | CategoricalAttribute | KeyValueAttribute | StringAttribute


def choose_keyvalue(epsilon: float, domain: int, padding: int) -> str:
    """The PCKV variant ("pckv-ue" or "pckv-grr") of least n Var[f_hat] for a rare key at this eps, d and l.

    Examples
    --------
    >>> choose_keyvalue(1.0, 4, 1), choose_keyvalue(1.0, 64, 2)
    ('pckv-grr', 'pckv-ue')
    """
    candidates = ("pckv-grr", "pckv-ue")
    variances = [float(registry.make_keyvalue(name, epsilon, domain, padding).frequency_variance(0.0))
                 for name in candidates]
    return candidates[int(np.argmin(variances))]


@dataclass(frozen=True)
class MixedBatch:
    """Perturbed reports of n devices: per attribute, the rows that sampled it and their reports."""

    n: int
    rows: dict[str, np.ndarray]
    reports: dict[str, Reports]


class MixedCollector:
    """Collect d mixed attributes under eps-LDP, k sampled per device (000 Sec. IV-C); see the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> c = MixedCollector([NumericAttribute("age", 18, 90), NumericAttribute("load", 0, 1)], epsilon=2.0)
    >>> rng = np.random.default_rng(0)
    >>> batch = c.perturb({"age": rng.uniform(18, 90, 1000), "load": rng.random(1000)}, rng)
    >>> c.k, sorted(c.estimate(c.accumulate(batch)))
    (1, ['age', 'load'])
    """

    def __init__(self, attributes: Sequence[Attribute], epsilon: float, k: int | None = None,
                 epsilon_lifetime: float | None = None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.epsilon_lifetime = None if epsilon_lifetime is None else check_epsilon(epsilon_lifetime)
        self.attributes = tuple(attributes)
        names = [a.name for a in self.attributes]
        if not names or len(set(names)) != len(names):
            raise LDPError(f"a collector needs attributes with distinct names, got {names}")
        self.dims = len(self.attributes)
        self.k = sampled_attributes(self.epsilon, self.dims) if k is None else check_dims(k)
        if self.k > self.dims:
            raise LDPError(f"cannot sample k = {self.k} of d = {self.dims} attributes")
        self.scale = self.dims / self.k
        self.mechanisms: dict[str, Mechanism] = {a.name: self._mechanism(a) for a in self.attributes}
        self.scalers = {a.name: RangeScaler(a.lo, a.hi) for a in self.attributes
                        if isinstance(a, NumericAttribute | KeyValueAttribute)}
        sizes = [block_size(self.mechanisms[name]) for name in names]
        starts = 1 + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.stats_slices = {
            name: slice(int(s), int(s) + size) for name, s, size in zip(names, starts, sizes, strict=True)
        }
        self.stats_size = 1 + sum(sizes)

    @classmethod
    def budget_split(cls, attributes: Sequence[Attribute], epsilon: float) -> MixedCollector:
        """The baseline 000 and 001 beat: every attribute reported by every device at eps/d."""
        return cls(attributes, epsilon, k=len(attributes))

    def _mechanism(self, attr: Attribute) -> Mechanism:
        eps = self.epsilon / self.k
        if isinstance(attr, KeyValueAttribute):
            if self.epsilon_lifetime is not None:
                raise LDPError(f"attribute {attr.name!r}: key-value mechanisms have no memo; they cannot keep a "
                               "lifetime budget")
            name = choose_keyvalue(eps, attr.domain, attr.padding) if attr.mechanism == "auto" else attr.mechanism
            return registry.make_keyvalue(name, eps, attr.domain, attr.padding)
        if isinstance(attr, StringAttribute):
            if self.epsilon_lifetime is not None:
                raise LDPError(f"attribute {attr.name!r}: no memoized mechanism reports strings")
            name = choose_heavy_hitters(eps) if attr.mechanism == "auto" else attr.mechanism
            if name not in registry.HEAVY_HITTERS:
                raise LDPError(f"attribute {attr.name!r}: {name!r} is not one of {list(registry.HEAVY_HITTERS)}")
            return registry.open_domain_class(name)(eps, attr.domain, seed=attr.seed,  # type: ignore[call-arg]
                                                     top=attr.top)
        if self.epsilon_lifetime is not None:
            return self._memoized(attr, eps)
        if isinstance(attr, CategoricalAttribute) and attr.oracle in registry.LONGITUDINAL:
            raise LDPError(f"attribute {attr.name!r}: the memoized {attr.oracle!r} needs a lifetime budget")
        if isinstance(attr, NumericAttribute) and attr.mechanism in registry.DISTRIBUTION:
            return registry.make_distribution(attr.mechanism, eps, **attr.parameters)
        if attr.parameters:
            raise LDPError(f"attribute {attr.name!r}: parameters go with memoized mechanisms (a lifetime budget)")
        if isinstance(attr, CategoricalAttribute) and attr.mechanism is not None:
            if not np.isclose(attr.mechanism.epsilon, eps, rtol=1e-12, atol=0.0):
                raise LDPError(f"attribute {attr.name!r}: its mechanism is built for eps = {attr.mechanism.epsilon}, "
                               f"but the collector gives each attribute eps / k = {eps}")
            return attr.mechanism
        if isinstance(attr, CategoricalAttribute):
            return registry.make(attr.oracle, eps, domain=attr.domain)
        name = choose_sampled(self.epsilon, self.dims, self.k) if attr.mechanism == "auto" else attr.mechanism
        if name not in registry.NUMERIC:
            raise LDPError(f"attribute {attr.name!r}: {name!r} is not a numeric mechanism ({sorted(registry.NUMERIC)})")
        return registry.make(name, eps)

    def _memoized(self, attr: NumericAttribute | CategoricalAttribute, eps: float) -> Mechanism:
        """The attribute's longitudinal mechanism at (eps_inf / k, eps / k) (module docstring)."""
        lifetime = self.epsilon_lifetime / self.k  # type: ignore[operator]
        kind: Literal["frequency", "numeric"] = "numeric" if isinstance(attr, NumericAttribute) else "frequency"
        if isinstance(attr, CategoricalAttribute) and attr.mechanism is not None:
            raise LDPError(f"attribute {attr.name!r}: a given mechanism has no memo; a lifetime budget needs "
                           f"one of {sorted(registry.LONGITUDINAL)}")
        domain = attr.domain if isinstance(attr, CategoricalAttribute) else None
        name = attr.oracle if isinstance(attr, CategoricalAttribute) else attr.mechanism
        name = choose_longitudinal(kind, lifetime, eps, domain) if name == "auto" else name
        if name not in registry.LONGITUDINAL or registry.longitudinal_class(name).kind != kind:
            known = sorted(n for n in registry.LONGITUDINAL if registry.longitudinal_class(n).kind == kind)
            raise LDPError(f"attribute {attr.name!r}: with a lifetime budget a {kind} attribute is reported by a "
                           f"memoized mechanism (auto, {', '.join(known)}), not {name!r}")
        mech = registry.make_longitudinal(name, lifetime, eps, domain, **attr.parameters)
        assert isinstance(mech, Mechanism)  # every registered longitudinal mechanism is one
        return mech

    @property
    def schemas(self) -> dict[str, ReportSchema]:
        """Per attribute, the shape and range of its valid reports."""
        return {name: mech.schema for name, mech in self.mechanisms.items()}

    def empty_stats(self) -> np.ndarray:
        return np.zeros(self.stats_size, dtype=np.float64)

    def perturb(self, records: Mapping[str, np.ndarray], rng: np.random.Generator,
                secrets: np.ndarray | None = None) -> MixedBatch:
        """Reports of n devices whose true values are the columns `records[name]` (all of length n); `secrets`, the
        devices' uint64 collection secrets, with a lifetime budget and only then."""
        n, inputs = self._validated(records)
        keys = self._secrets(secrets, n)
        chosen = self._sampled(n, rng, keys)
        rows, reports = {}, {}
        for j, attr in enumerate(self.attributes):
            sampled = np.flatnonzero(chosen[:, j])
            rows[attr.name] = sampled
            mech = self.mechanisms[attr.name]
            reports[attr.name] = (mech.perturb(inputs[attr.name][sampled], rng) if keys is None else
                                  mech.perturb(inputs[attr.name][sampled], rng,  # type: ignore[call-arg]
                                               secrets=attribute_secrets(keys[sampled], attr.name)))
        return MixedBatch(n=n, rows=rows, reports=reports)

    def memo_keys(self, records: Mapping[str, np.ndarray],
                  secrets: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """With a lifetime budget: per attribute, the rows (devices) that report it and the key of the memo each
        one's report reads (`Longitudinal.memo_keys`), as `perturb` with the same secrets uses them."""
        n, inputs = self._validated(records)
        keys = self._secrets(secrets, n)
        if keys is None:
            raise LDPError("only a collector with a lifetime budget memoizes")
        chosen = self._sampled(n, None, keys)
        out = {}
        for j, attr in enumerate(self.attributes):
            rows = np.flatnonzero(chosen[:, j])
            mech: Longitudinal = self.mechanisms[attr.name]  # type: ignore[assignment]
            out[attr.name] = (rows, mech.memo_keys(inputs[attr.name][rows], attribute_secrets(keys[rows], attr.name)))
        return out

    def _validated(self, records: Mapping[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]]:
        """n and every column as its mechanism takes it (validated before sampling, so a bad value is rejected
        even where it would not be sampled)."""
        missing = [a.name for a in self.attributes if a.name not in records]
        if missing:
            raise LDPError(f"records lack attribute columns {missing}")
        lengths = {len(np.atleast_1d(records[a.name])) for a in self.attributes}
        if len(lengths) != 1:
            raise LDPError(f"attribute columns have different lengths: {sorted(lengths)}")
        return lengths.pop(), {a.name: self._inputs(a, records[a.name]) for a in self.attributes}

    def _secrets(self, secrets: np.ndarray | None, n: int) -> np.ndarray | None:
        """The devices' secrets, checked: required with a lifetime budget, refused without one."""
        if self.epsilon_lifetime is None:
            if secrets is not None:
                raise LDPError("device secrets go with a lifetime budget (memoized mechanisms) only")
            return None
        if secrets is None:
            raise LDPError("a collector with a lifetime budget needs every device's secret")
        return check_secrets(secrets, n)

    def _sampled(self, n: int, rng: np.random.Generator | None, secrets: np.ndarray | None) -> np.ndarray:
        """(n, d) bool: the k attributes each device reports, fresh from rng, or fixed by its secret (keyed by the
        attributes' names)."""
        if secrets is None:
            scores = rng.random((n, self.dims))  # type: ignore[union-attr]
        else:
            names = np.array([name_key(a.name) for a in self.attributes], dtype=np.uint64)
            scores = keyed_uniform(secrets[:, None], TAG_ATTRIBUTE_SAMPLE, names[None, :])
        chosen = np.zeros((n, self.dims), dtype=bool)
        if self.k == self.dims:
            chosen[:] = True
        else:
            np.put_along_axis(chosen, np.argpartition(scores, self.k - 1, axis=1)[:, : self.k], True, axis=1)
        return chosen

    def _inputs(self, attr: Attribute, column: np.ndarray) -> np.ndarray:
        if isinstance(attr, KeyValueAttribute):
            return self._unit_pairs(attr, column)
        if isinstance(attr, StringAttribute):  # padded byte rows; LDPError for a string the domain refuses
            return attr.domain.encode(column)
        if isinstance(attr, NumericAttribute):
            return self.scalers[attr.name].to_unit(np.atleast_1d(column))
        values = np.atleast_1d(np.asarray(column))
        _validate_codes(values, attr)
        return values

    def _unit_pairs(self, attr: KeyValueAttribute, column: np.ndarray) -> np.ndarray:
        """A pairs array with values on [lo, hi] as the mechanism takes it, values on [-1, 1] (empty slots 0)."""
        pairs = np.array(column, dtype=np.float64)
        if pairs.ndim != 3 or pairs.shape[2] != 2:
            raise LDPError(f"attribute {attr.name!r}: a pairs array (n, slots, 2) expected, got shape {pairs.shape}")
        held = pairs[:, :, 0] != EMPTY
        pairs[:, :, 1][held] = self.scalers[attr.name].to_unit(pairs[:, :, 1][held])
        pairs[:, :, 1][~held] = 0.0
        check_pairs(pairs, attr.domain)
        return pairs

    def accumulate(self, batch: MixedBatch) -> np.ndarray:
        """Additive statistics of a batch (layout in the module docstring)."""
        return joined_stats(batch.n, [attribute_block(len(batch.rows[name]), mech.accumulate(batch.reports[name]))
                                      for name, mech in self.mechanisms.items()])

    def estimate(self, stats: np.ndarray, caps: Mapping[str, LevelCap] | None = None) -> dict[str, Estimate]:
        """Per attribute: the mean on its [lo, hi], or the frequency vector; unbiased, with standard errors.

        `caps`: per string attribute, a cap of its heavy-hitter decode (a poisoning defence,
        `ldpstream.mechanisms.poisoning.heavy`)."""
        stats = np.asarray(stats, dtype=np.float64)
        if stats.shape != (self.stats_size,):
            raise LDPError(f"statistics must have shape ({self.stats_size},), got {stats.shape}")
        total = int(stats[0])
        out: dict[str, Estimate] = {}
        for attr in self.attributes:
            block = stats[self.stats_slices[attr.name]]
            if isinstance(attr, KeyValueAttribute):
                out[attr.name] = self._keyvalue_estimate(attr, total, int(block[0]), block[1:])
                continue
            est = self._unit_estimate(attr, total, int(block[0]), block[1:], (caps or {}).get(attr.name))
            out[attr.name] = self.scalers[attr.name].estimate_from_unit(est) if attr.name in self.scalers else est
        return out

    def distributions(self, stats: np.ndarray) -> dict[str, Distribution | None]:
        """Per numeric attribute reported by a distribution mechanism (`ldpstream.mechanisms.distribution`): its
        distribution on [lo, hi] among the devices that reported it, or None while none has (module docstring)."""
        stats = np.asarray(stats, dtype=np.float64)
        if stats.shape != (self.stats_size,):
            raise LDPError(f"statistics must have shape ({self.stats_size},), got {stats.shape}")
        out: dict[str, Distribution | None] = {}
        for attr in self.attributes:
            mech = self.mechanisms[attr.name]
            if isinstance(mech, DistributionMechanism) and isinstance(attr, NumericAttribute):
                block = stats[self.stats_slices[attr.name]]
                out[attr.name] = mech.distribution(block[1:]).rescaled(attr.lo, attr.hi) if block[0] > 0 else None
        return out

    def _unit_estimate(self, attr: Attribute, total: int, sampled: int, sub_stats: np.ndarray,
                       cap: LevelCap | None = None) -> Estimate:
        mech = self.mechanisms[attr.name]
        if isinstance(attr, StringAttribute):
            found = None
            if sampled:
                found = mech.estimate(sub_stats) if cap is None else mech.heavy_hitters(  # type: ignore[attr-defined]
                    sub_stats, cap=cap)
            assert found is None or isinstance(found, HeavyHitters)  # what every HEAVY_HITTERS mechanism estimates
            return _heavy_hitters(found, self.scale, sampled, total)
        width = _answers(mech, attr)
        if total == 0:
            return _squeeze(Estimate(n=0, value=np.full(width, np.nan), stderr=np.full(width, np.inf)), attr)
        if sampled == 0:  # 000 Sec. IV-C's estimator is 0 here; its error is the sampling term at m2 = 1
            worst = np.full(width, np.sqrt((self.scale - 1) / total))
            return _squeeze(Estimate(n=total, value=np.zeros(width), stderr=worst), attr)
        sub = mech.estimate(sub_stats)
        weight = self.scale * sampled / total
        value = weight * np.atleast_1d(sub.value)
        if isinstance(mech, DistributionMechanism):
            m2 = np.asarray(mech.second_moment(sub_stats))
        elif isinstance(mech, NumericMechanism):
            a, b = mech.variance_coefficients()
            m2 = second_moment_plugin(sampled, sub_stats[1], sub_stats[2], a, b)
        elif isinstance(mech, FactorizationMechanism):
            m2 = _workload_second_moment(mech, value)
        else:
            m2 = np.clip(value, 0.0, 1.0)
        var = weight**2 * np.atleast_1d(sub.stderr) ** 2 + (self.scale - 1) * m2 / total
        return _squeeze(Estimate(n=total, value=value, stderr=np.sqrt(var)), attr)


    def _keyvalue_estimate(self, attr: KeyValueAttribute, total: int, sampled: int, sub_stats: np.ndarray) -> Estimate:
        """Shape (2, d): row 0 the frequency of every key (unbiased, as a categorical attribute's), row 1 the mean
        of its values on [lo, hi] (the mechanism's ratio among the sampled devices,
        `ldpstream.mechanisms.keyvalue.base`).

        The sampled devices' holders are a random subset of all holders, so the mean's variance gains the sampling
        term (s - 1) Var(v) / (N f), Var(v) <= (1 - m)(1 + m) for values in [-1, 1] (Bhatia-Davis): an upper bound.
        """
        mech: KeyValueMechanism = self.mechanisms[attr.name]  # type: ignore[assignment]
        d, scaler = attr.domain, self.scalers[attr.name]
        if total == 0 or sampled == 0:
            freq = np.full(d, np.nan if total == 0 else 0.0)
            freq_se = np.full(d, np.inf if total == 0 else np.sqrt((self.scale - 1) / total))
            return Estimate(n=total, value=np.stack([freq, np.full(d, np.nan)]),
                            stderr=np.stack([freq_se, np.full(d, np.inf)]))
        sub, means = mech.estimate(sub_stats), mech.estimate_means(sub_stats)
        weight = self.scale * sampled / total
        freq = weight * sub.value[0]
        f = np.clip(freq, 0.0, 1.0)
        freq_var = weight**2 * sub.stderr[0] ** 2 + (self.scale - 1) * f / total
        m = np.clip(np.nan_to_num(means.value), -1.0, 1.0)
        spread = (self.scale - 1) * (1 - m**2) / (total * np.maximum(f, 1.0 / total))
        mean_se = np.sqrt(means.stderr**2 + spread) * scaler.half_width
        return Estimate(n=total, value=np.stack([freq, scaler.from_unit(means.value)]),
                        stderr=np.stack([np.sqrt(freq_var), mean_se]))

def _heavy_hitters(found: HeavyHitters | None, scale: float, sampled: int, total: int) -> HeavyHitters:
    """The tree's heavy hitters among the n_j devices that sampled the attribute, as frequencies among all N, with
    the sampling term of the variance (module docstring; the indicator's second moment is the frequency)."""
    if found is None or total == 0:
        return HeavyHitters(n=total, value=np.zeros(0), stderr=np.zeros(0))
    weight = scale * sampled / total
    value = weight * found.value
    var = weight**2 * found.stderr**2 + (scale - 1) * np.clip(value, 0.0, 1.0) / total
    return HeavyHitters(n=total, value=value, stderr=np.sqrt(var), items=found.items)


def _answers(mech: Mechanism, attr: Attribute) -> int:
    """How many numbers an attribute's estimate has: 1 (numeric), K (frequencies) or p (workload answers)."""
    if isinstance(mech, FactorizationMechanism):
        return int(mech.w.shape[0])
    return attr.domain if isinstance(attr, CategoricalAttribute) else 1


def _workload_second_moment(mech: FactorizationMechanism, answers: np.ndarray) -> np.ndarray:
    """Plug-in of mean over devices of W[q, u]^2 per query q, for the sampling term of the variance.

    For 0/1 workloads (histogram, prefix, ranges, marginals) W^2 = W, so it is the answer itself (clipped to
    [0, 1]); otherwise max_u W[q, u]^2, an upper bound, which can only overstate the standard error.
    """
    w = mech.w
    if np.isin(w, (0.0, 1.0)).all():
        return np.clip(answers, 0.0, 1.0)
    return np.max(w**2, axis=1)


def _squeeze(est: Estimate, attr: Attribute) -> Estimate:
    """A numeric attribute's estimate is a scalar (0-d arrays); a categorical one's is a vector of K."""
    if isinstance(attr, CategoricalAttribute):
        return est
    return Estimate(n=est.n, value=np.asarray(est.value).reshape(()), stderr=np.asarray(est.stderr).reshape(()))


def _validate_codes(values: np.ndarray, attr: CategoricalAttribute) -> None:
    if values.dtype.kind == "f" and (np.isnan(values).any() or not np.array_equal(values, np.floor(values))):
        raise LDPError(f"attribute {attr.name!r}: categories must be integer codes")
    if values.dtype.kind not in "iuf":
        raise LDPError(f"attribute {attr.name!r}: categories must be integer codes, got dtype {values.dtype}")
    if values.size and not (values.min() >= 0 and values.max() < attr.domain):
        raise LDPError(f"attribute {attr.name!r}: unknown category (codes must lie in 0..{attr.domain - 1})")
