"""The contract every mechanism implements: columnar reports, a report schema, additive statistics, estimates.

A *report batch* is a dict of numpy columns, all of length n on axis 0 (one row per device). A mechanism
turns true values into a report batch (`perturb`), turns a report batch into a flat float64 statistics vector
(`accumulate`) that is additive (the statistics of a union are the sum of the statistics of the parts), and
turns statistics into an unbiased `Estimate` with a standard error from its closed-form variance.
The statistics vector is what the aggregator stores (in Redis) and merges across workers and windows.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

Reports = dict[str, np.ndarray]


class LDPError(ValueError):
    """Invalid input to a mechanism (bad epsilon, NaN, value outside the domain, unknown category)."""


def least_epsilon(delta_at: Callable[[float], float], high: float, delta: float, steps: int) -> float:
    """The least eps in [0, high] (bisection to high / 2^steps, rounded up) with delta_at(eps) <= delta, for a
    delta_at that falls as eps grows (a privacy curve: composition, shuffling)."""
    low = 0.0
    if delta_at(low) <= delta:
        return 0.0
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if delta_at(mid) <= delta else (mid, high)
    return high


def check_epsilon(epsilon: float) -> float:
    """Return epsilon as a float, or raise LDPError unless it is finite and > 0."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError) as exc:
        raise LDPError(f"epsilon must be a number, got {epsilon!r}") from exc
    if not math.isfinite(eps) or eps <= 0:
        raise LDPError(f"epsilon must be finite and > 0, got {epsilon!r}")
    return eps


@dataclass(frozen=True)
class Column:
    """One column of a report batch: dtype, values per row, and the inclusive range of every entry.

    `allowed` (optional) is the finite set of values an entry may take (e.g. Duchi's +-B); `low`/`high` still bound it.
    """

    name: str
    dtype: str
    low: float
    high: float
    width: int = 1
    allowed: tuple[float, ...] | None = None

    def row_shape(self) -> tuple[int, ...]:
        return () if self.width == 1 else (self.width,)


@dataclass(frozen=True)
class ReportSchema:
    """The declared shape and range of a valid report batch, so an aggregator can reject impossible reports."""

    columns: tuple[Column, ...]

    @cached_property
    def widths(self) -> Mapping[str, int]:
        """Values per row of each column, by name."""
        return {c.name: c.width for c in self.columns}

    @cached_property
    def dtypes(self) -> Mapping[str, str]:
        """The dtype of each column, by name."""
        return {c.name: c.dtype for c in self.columns}

    def violations(self, reports: Reports) -> np.ndarray:
        """Per row, '' if the report is valid, else the reason it is not (vectorised over rows; the first reason of
        the first column that refuses the row: outside the range, then not an allowed value, then not an integer).

        Raises LDPError if the batch as a whole is malformed (missing or extra columns, ragged lengths, wrong width).
        """
        names = {c.name for c in self.columns}
        if set(reports) != names:
            raise LDPError(f"report columns {sorted(reports)} != expected {sorted(names)}")
        lengths = {len(np.asarray(reports[c.name])) for c in self.columns}
        if len(lengths) != 1:
            raise LDPError(f"report columns have different lengths: {sorted(lengths)}")
        n = lengths.pop()
        reasons = np.full(n, "", dtype=object)
        for col in self.columns:
            arr = np.asarray(reports[col.name])
            if arr.shape[1:] != col.row_shape():
                raise LDPError(f"column {col.name!r}: row shape {arr.shape[1:]} != expected {col.row_shape()}")
            if arr.dtype.kind not in _NUMERIC_KINDS:
                raise LDPError(f"column {col.name!r}: dtype {arr.dtype} is not numeric")
            for bad, reason in _column_problems(col, arr.reshape(n, col.width)):
                if bad.any():  # the reasons array is written only where a row is refused: valid batches skip it
                    reasons[bad & (reasons == "")] = reason
        return reasons


_NUMERIC_KINDS = frozenset("biufc")  # bool and np.number's kinds


# Relative slack on the bounds and allowed values of a floating-point column. They are closed forms of exp, log and
# tanh (Duchi's +-B, PM's C), which two libms may round an ulp or two apart (V8's and glibc's, say), so a device on
# another platform computes them that far from the aggregator's: exact equality would refuse every report of such a
# device. 1e-9 is far above those ulps and far below anything that could move an estimate.
FLOAT_RTOL = 1e-9


def _column_problems(col: Column, values: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Per problem of one column, in order, its rows (bool) and its reason. Integers (and bools) are finite and
    whole, so only their range is compared; floating values are also checked finite and, for an integer column,
    whole. A floating-point column's bounds and allowed values hold within FLOAT_RTOL."""
    exact = values.dtype.kind in "biu"
    flat = values if exact else values.astype(np.float64, copy=False)
    slack = FLOAT_RTOL if np.dtype(col.dtype).kind == "f" else 0.0
    out_of_range = (flat < col.low - slack * abs(col.low)) | (flat > col.high + slack * abs(col.high))
    if not exact:
        out_of_range |= ~np.isfinite(flat)
    problems = [(_per_row(out_of_range.any(axis=1)), f"{col.name} outside [{col.low}, {col.high}]")]
    if col.allowed is not None and slack:
        allowed_values = np.asarray(col.allowed, dtype=np.float64)
        allowed = np.asarray((np.abs(flat[..., None] - allowed_values) <= slack * np.abs(allowed_values)).any(axis=-1))
        problems.append((_per_row(~allowed.all(axis=1)), f"{col.name} not in the allowed set of values"))
    elif col.allowed is not None:
        allowed = np.isin(flat.astype(np.float64, copy=False), np.asarray(col.allowed, dtype=np.float64))
        problems.append((_per_row(~allowed.all(axis=1)), f"{col.name} not in the allowed set of values"))
    if not exact and np.dtype(col.dtype).kind in "iu":
        fractional = (flat != np.floor(flat)).any(axis=1) & np.isfinite(flat).all(axis=1)
        problems.append((_per_row(fractional), f"{col.name} is not an integer"))
    return problems


def _per_row(reduced: np.ndarray | np.bool) -> np.ndarray:
    """A reduction of (n, width) values along axis 1: n entries (numpy's types also allow one scalar)."""
    assert isinstance(reduced, np.ndarray)
    return reduced


@dataclass(frozen=True)
class Estimate:
    """An unbiased estimate with its standard error (same shape), from `n` reports."""

    n: int
    value: np.ndarray
    stderr: np.ndarray

    def confidence_interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Normal-approximation interval value +- z * stderr at the given two-sided level."""
        from scipy.stats import norm

        z = float(norm.ppf(0.5 + level / 2))
        return self.value - z * self.stderr, self.value + z * self.stderr


class Mechanism(ABC):
    """An epsilon-LDP mechanism: vectorised perturbation, additive statistics, unbiased estimate."""

    name: ClassVar[str]
    # Preference among the `auto` candidates of its kind: of two with equal variance the lower rank is chosen.
    # Every registered class declares one, distinct within its registry table
    # (`ldpstream.mechanisms.registry.by_preference`).
    auto_rank: ClassVar[int]
    epsilon: float

    @property
    @abstractmethod
    def schema(self) -> ReportSchema:
        """The shape and range of a valid report batch."""

    @property
    @abstractmethod
    def stats_size(self) -> int:
        """Length of the statistics vector."""

    @abstractmethod
    def perturb(self, values: np.ndarray, rng: np.random.Generator) -> Reports:
        """Perturb the true values of n devices (one device = a batch of one)."""

    @abstractmethod
    def accumulate(self, reports: Reports) -> np.ndarray:
        """Additive float64 statistics vector (length `stats_size`) of a report batch."""

    @abstractmethod
    def estimate(self, stats: np.ndarray) -> Estimate:
        """Unbiased estimate and its standard error from a statistics vector."""

    def empty_stats(self) -> np.ndarray:
        """The statistics of no reports."""
        return np.zeros(self.stats_size, dtype=np.float64)
