"""Key-value mechanisms: each device holds a set of (key, value) pairs and one report estimates, per key, how many
devices hold it (the frequency f_k) and the mean of their values (m_k), at once (PrivKV, PCKV; 002 "Key-Value Data
Collection").

Input: a *pairs array* of shape (n, slots, 2), float64: row j is device j's set, slot i holds (key code, value)
with the key in 0..d-1 (or -1 for an empty slot: devices hold sets of different sizes) and the value in [-1, 1];
a key appears at most once per device (`pairs_array` builds one from lists of dicts).

Every mechanism here reports, for every key k, two numbers per device: a *support* X (0/1, "the report points at
k") and a *value* Y in {-1, 0, 1} (Y != 0 only if X = 1), plus an offset O (what X is when the device says nothing
about k: 1 for PCKV, 1{k was sampled} for PrivKV). Let r_k be the probability that a device's report is about its
own pair (k, v): 1/max(|S|, l) for PCKV's padding-and-sampling, 1/d for PrivKV's uniform key sampling, 0 if the
device does not hold k. Each mechanism has constants b (what an unrelated device's X is, per unit of O), a gain
G_f and a gain G_s such that

    E[X - b O] = r G_f,        E[Y] = r G_s v,

so with rho = the r of a holder (1/l, or 1/d), the per-device terms c_f = (X - b O) / (rho G_f) and
c_s = Y / (rho G_s) have means 1{k in S} and 1{k in S} v (exactly when |S| <= l for PCKV). Their means over the n
devices are the unbiased estimates of f_k and of the value total s_k = f_k m_k (`estimate`), and their exact
variances and covariance follow from the second moments E[(X - b O)^2], E[Y^2], E[(X - b O) Y] of each mechanism
(`per_device_moments`). Statistics: the column sums of X - b O and Y, and n (additive).

The mean per key is the ratio m_hat = s_hat / f_hat (`estimate_means`; PCKV's estimator before its clipping, PrivKV's
after calibration). A ratio of unbiased estimates is only asymptotically unbiased: by the delta method

    E[m_hat] = m + (m Var[f_hat] - Cov[s_hat, f_hat]) / f^2 + O(n^-2),
    Var[m_hat] ~ (Var[s_hat] - 2 m Cov[s_hat, f_hat] + m^2 Var[f_hat]) / f^2,

so the bias is O(1/n), a vanishing fraction of the O(1/sqrt(n)) standard error. The standard errors are plug-ins:
the closed forms at (f_hat, m_hat) clipped to [0, 1] and [-1, 1], with the holders' mean of v^2 taken as m_hat^2 (a
lower bound, which only overstates Var[s_hat] through the subtracted E[Y]^2 term).

Privacy: each mechanism gives the exact probability of a report under a device's set (`log_pmf`), from which the
tests enumerate every output of small domains and compute the epsilon it provides.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from ldpstream.mechanisms.base import Estimate, LDPError, Mechanism, Reports, check_epsilon
from ldpstream.mechanisms.frequency.base import (
    MAX_DOMAIN_SIZE,
    MAX_EPSILON,
    SAMPLE_CHUNK_ENTRIES,
    check_report_batch,
    split_count,
)

EMPTY = -1  # the key of an empty slot
MAX_PADDING = 1024  # the largest padding length l


def pairs_array(sets: Sequence[Mapping[int, float]], slots: int | None = None) -> np.ndarray:
    """The pairs array (n, slots, 2) of devices' sets given as {key code: value} (empty slots: key -1).

    Examples
    --------
    >>> pairs_array([{0: 0.5, 3: -1.0}, {}]).tolist()
    [[[0.0, 0.5], [3.0, -1.0]], [[-1.0, 0.0], [-1.0, 0.0]]]
    """
    width = max([len(s) for s in sets] + [1]) if slots is None else slots
    out = np.zeros((len(sets), width, 2))
    out[:, :, 0] = EMPTY
    for j, pairs in enumerate(sets):  # building input from Python objects, not a hot path
        if len(pairs) > width:
            raise LDPError(f"device {j} holds {len(pairs)} pairs, more than the {width} slots")
        for i, (key, value) in enumerate(pairs.items()):
            out[j, i] = (key, value)
    return out


def check_pairs(pairs: np.ndarray, domain_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys int64 (n, slots) with -1 for empty, values float64 (n, slots) with 0 in empty slots), or LDPError for a
    bad shape, a key outside 0..d-1, a value outside [-1, 1] or NaN, or a key held twice by one device."""
    arr = np.asarray(pairs)
    if arr.ndim != 3 or arr.shape[2] != 2 or arr.shape[1] < 1:
        raise LDPError(f"key-value input is an (n, slots, 2) array of (key, value) pairs, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise LDPError(f"key-value pairs must be numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    raw_keys, values = arr[:, :, 0], arr[:, :, 1]
    if not np.isfinite(raw_keys).all() or not np.array_equal(raw_keys, np.floor(raw_keys)):
        raise LDPError("keys must be integer codes (or -1 for an empty slot)")
    if raw_keys.size and not (raw_keys.min() >= EMPTY and raw_keys.max() < domain_size):
        raise LDPError(f"unknown key: codes must lie in 0..{domain_size - 1} (or -1 for an empty slot)")
    keys = raw_keys.astype(np.int64)
    held = keys != EMPTY
    if not (np.all(np.abs(values[held]) <= 1.0)):
        raise LDPError("values must lie in [-1, 1] (NaN is not a value)")
    ordered = np.sort(np.where(held, keys, EMPTY - np.arange(keys.shape[1])), axis=1)
    if (ordered[:, 1:] == ordered[:, :-1]).any():
        raise LDPError("a device holds a key twice: a set has at most one value per key")
    return keys, np.where(held, values, 0.0)


def check_padding(padding: int) -> int:
    """The padding length l as an int in [1, MAX_PADDING], or LDPError."""
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or not 1 <= padding <= MAX_PADDING:
        raise LDPError(f"padding length must be an integer in [1, {MAX_PADDING}], got {padding!r}")
    return int(padding)


def check_key_domain(domain_size: int) -> int:
    """The number of keys d as an int in [1, MAX_DOMAIN_SIZE], or LDPError."""
    if isinstance(domain_size, bool) or not isinstance(domain_size, (int, np.integer)):
        raise LDPError(f"the number of keys must be an integer, got {domain_size!r}")
    if not 1 <= domain_size <= MAX_DOMAIN_SIZE:
        raise LDPError(f"the number of keys must be in [1, {MAX_DOMAIN_SIZE}], got {domain_size}")
    return int(domain_size)


def discretize(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """v in [-1, 1] -> +1 with probability (1 + v) / 2, else -1 (int8): unbiased for v (Harmony, 001 Alg. 2)."""
    return np.where(rng.random(values.shape) < (1.0 + values) / 2.0, 1, -1).astype(np.int8)


def flip(bits: np.ndarray, keep: float, rng: np.random.Generator) -> np.ndarray:
    """Keep each +-1 entry with probability `keep`, else negate it (int8)."""
    return np.where(rng.random(bits.shape) < keep, bits, -bits).astype(np.int8)


def discretized_probability(values: np.ndarray | float, sign: int) -> np.ndarray:
    """Pr[`discretize`(v) = sign] for sign in {-1, 1}."""
    return (1.0 + sign * np.asarray(values, dtype=np.float64)) / 2.0


class KeyValueMechanism(Mechanism):
    """An epsilon-LDP key-value mechanism over d keys (module docstring): one report per device estimates every
    key's frequency and mean value."""

    takes_padding: ClassVar[bool] = False  # whether the constructor takes a padding length l (PCKV)

    def __init__(self, epsilon: float, domain_size: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        if self.epsilon > MAX_EPSILON:
            raise LDPError(f"epsilon {self.epsilon:g} is above the supported maximum {MAX_EPSILON:g}")
        self.domain_size = check_key_domain(domain_size)

    # --- what a concrete mechanism declares --------------------------------------------------------------------
    @property
    @abstractmethod
    def holder_rate(self) -> float:
        """rho: the probability that a holder of key k reports about its pair (k, v) (1/l or 1/d)."""

    @property
    @abstractmethod
    def frequency_gain(self) -> float:
        """G_f: E[X - b O] = r G_f."""

    @property
    @abstractmethod
    def value_gain(self) -> float:
        """G_s: E[Y] = r G_s v."""

    @abstractmethod
    def selection(self, keys: np.ndarray) -> np.ndarray:
        """r (n, d): per device and key, the probability that its report is about its own pair with that key."""

    @abstractmethod
    def per_device_moments(self, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """E[(X - b O)^2], E[Y^2], E[(X - b O) Y] of one device with selection r and value v (broadcast arrays)."""

    @abstractmethod
    def _sample(self, keys: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> Reports:
        """Reports of a chunk of validated devices (vectorised)."""

    @abstractmethod
    def centered_sums(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """Per key, the sums of X - b O and of Y over a validated batch (each (d,))."""

    @abstractmethod
    def per_device_terms(self, reports: Reports) -> tuple[np.ndarray, np.ndarray]:
        """(X - b O, Y), each (n, d) float64, of a validated batch (tests and audits; `centered_sums` is the fast
        column sum)."""

    @abstractmethod
    def _log_pmf_of_set(self, reports: Reports, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """(n,) log Pr[report | the device holds the pairs (keys, values)] (1-D, empty slots removed)."""

    # --- the shared contract -------------------------------------------------------------------------------------
    @property
    def stats_size(self) -> int:
        return 2 * self.domain_size + 1

    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        """Reports of the devices whose sets are the rows of a pairs array (module docstring)."""
        keys, vals = check_pairs(values, self.domain_size)
        n = keys.shape[0]
        columns = self.schema.columns
        reports = {c.name: np.empty((n, *c.row_shape()), dtype=c.dtype) for c in columns}
        rows = max(1, SAMPLE_CHUNK_ENTRIES // max(c.width for c in columns))
        for start in range(0, n, rows):  # chunks of devices, each sampled vectorised
            chunk = self._sample(keys[start : start + rows], vals[start : start + rows], rng)
            for name, column in reports.items():
                column[start : start + rows] = chunk[name]
        return reports

    def accumulate(self, reports: Reports) -> np.ndarray:
        n = check_report_batch(self.schema, reports)
        support, value = self.centered_sums(reports)
        return np.concatenate([support, value, [float(n)]]).astype(np.float64)

    def estimate(self, stats: np.ndarray) -> Estimate:
        """Shape (2, d): row 0 the frequency of every key, row 1 its value total s_k = f_k m_k; both unbiased (exactly
        when no device holds more than l pairs, for PCKV), the standard errors from the closed forms."""
        support, value, n = self._check_stats(stats)
        d = self.domain_size
        if n == 0:
            return Estimate(n=0, value=np.full((2, d), np.nan), stderr=np.full((2, d), np.inf))
        freq = support / (n * self.holder_rate * self.frequency_gain)
        total = value / (n * self.holder_rate * self.value_gain)
        var_f, var_s, _ = self._plugin_covariance(freq, total)
        return Estimate(n=n, value=np.stack([freq, total]), stderr=np.sqrt(np.stack([var_f, var_s]) / n))

    def estimate_means(self, stats: np.ndarray) -> Estimate:
        """The mean value of every key among its holders, s_hat / f_hat, on [-1, 1]: consistent, biased O(1/n)
        (module docstring), with the delta-method standard error; NaN (stderr inf) where f_hat <= 0."""
        est = self.estimate(stats)
        if est.n == 0:
            return Estimate(n=0, value=est.value[1], stderr=est.stderr[1])
        freq, total = est.value
        held = freq > 0
        safe = np.where(held, freq, 1.0)
        mean = np.where(held, total / safe, np.nan)
        var_f, var_s, cov = self._plugin_covariance(freq, total)
        m = np.clip(np.nan_to_num(mean), -1.0, 1.0)
        f = np.clip(safe, 0.0, 1.0)
        ratio_var = np.maximum(var_s - 2 * m * cov + m**2 * var_f, 0.0) / np.maximum(f, 1e-300) ** 2
        return Estimate(n=est.n, value=mean, stderr=np.where(held, np.sqrt(ratio_var / est.n), np.inf))

    def per_device_covariance(self, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Var[c_f], Var[c_s], Cov[c_f, c_s] of one device's terms (module docstring), exact, at r and v."""
        xx, yy, xy = self.per_device_moments(r, v)
        mean_x, mean_y = r * self.frequency_gain, r * self.value_gain * v
        scale_f, scale_s = self.holder_rate * self.frequency_gain, self.holder_rate * self.value_gain
        return ((xx - mean_x**2) / scale_f**2, (yy - mean_y**2) / scale_s**2,
                (xy - mean_x * mean_y) / (scale_f * scale_s))

    def frequency_variance(self, frequency: np.ndarray | float) -> np.ndarray:
        """n * Var[f_hat_k] at true frequency f_k (every holder with at most l pairs); exact."""
        f = np.asarray(frequency, dtype=np.float64)
        return self._mixture(f, np.zeros_like(f), np.zeros_like(f))[0]

    def mean_variance(self, frequency: np.ndarray | float, mean: np.ndarray | float) -> np.ndarray:
        """n * Var[m_hat_k] to first order (delta method) at f_k and m_k, every holder's value equal to m_k."""
        f, m = np.broadcast_arrays(np.asarray(frequency, dtype=np.float64), np.asarray(mean, dtype=np.float64))
        var_f, var_s, cov = self._mixture(f, m, m**2)
        return (var_s - 2 * m * cov + m**2 * var_f) / f**2

    def plugin_covariance(self, freq: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """n * (Var[f_hat], Var[s_hat], Cov[f_hat, s_hat]) per key, plugging in estimates of f and s = f m (clipped
        into their ranges; the standard errors of `estimate` are these)."""
        return self._plugin_covariance(freq, total)

    def _plugin_covariance(self, freq: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = np.clip(freq, 0.0, 1.0)
        m = np.clip(np.divide(total, f, out=np.zeros_like(f), where=f > 0), -1.0, 1.0)
        return self._mixture(f, m, m**2)

    def _mixture(self, f: np.ndarray, m: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """n * (Var[f_hat], Var[s_hat], Cov) when a fraction f of devices hold the key (selection rho), their values
        averaging m with mean square m2, the rest not (selection 0)."""
        rho = self.holder_rate
        holder_xx, holder_yy, holder_xy = self.per_device_moments(np.full_like(f, rho), m)
        other_xx, other_yy, other_xy = self.per_device_moments(np.zeros_like(f), np.zeros_like(f))
        xx = f * holder_xx + (1 - f) * other_xx
        yy = f * holder_yy + (1 - f) * other_yy
        xy = f * holder_xy + (1 - f) * other_xy
        # Var of a sum of independent devices: sum of E[term^2] minus the squares of the devices' own means.
        sq_x = f * (rho * self.frequency_gain) ** 2
        sq_y = f * m2 * (rho * self.value_gain) ** 2
        sq_xy = f * m * rho**2 * self.frequency_gain * self.value_gain
        scale_f, scale_s = rho * self.frequency_gain, rho * self.value_gain
        return (xx - sq_x) / scale_f**2, (yy - sq_y) / scale_s**2, (xy - sq_xy) / (scale_f * scale_s)

    def log_pmf(self, reports: Reports, sets: np.ndarray) -> np.ndarray:
        """(n, m): log Pr[report j | the device's set is sets[i]], for a pairs array `sets` (m, slots, 2); exact up
        to float rounding. epsilon-LDP is: per report, the max over sets minus the min is at most epsilon."""
        check_report_batch(self.schema, reports)
        keys, values = check_pairs(sets, self.domain_size)
        columns = [self._log_pmf_of_set(reports, k[k != EMPTY], v[k != EMPTY]) for k, v in zip(keys, values,
                                                                                               strict=True)]
        return np.stack(columns, axis=1)

    def _check_stats(self, stats: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        s, n = split_count(stats, self.stats_size)
        d = self.domain_size
        return s[:d], s[d : 2 * d], n

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g}, domain_size={self.domain_size})"
