"""One set of contract checks, applied to every mechanism (in the style of river's `checks`).

A mechanism is exercised through a `MechanismCase`: a factory (eps -> mechanism), a generator of true inputs, and
three small adapters that say what the mechanism estimates per user:
- `expected(mech, values)`: per-user estimand, float (n, m) (t itself for a numeric mechanism; the one-hot vector
  of the user's category for a frequency oracle);
- `contributions(mech, reports)`: per-user unbiased terms, float (n, m), whose column means are the estimate;
- `variance(mech, values)`: the closed-form per-user variance of those terms, float (n, m).

The checks (each a plain function; `run_all` runs them together):
- schema: reports pass the mechanism's own schema, `accumulate` has `stats_size` entries;
- determinism: same seed, same reports; another seed, other reports;
- unbiased: |estimate - truth| <= 4 standard errors of the closed form, per coordinate, at n >= 2e5;
- variance: the mean of (contribution - expected)^2 is unbiased for the mean closed-form variance; it must lie
  within 4 of its own standard errors, estimated from the sample's 4th moment (sd of the squared deviations);
- merge: statistics of A plus statistics of B equal the statistics of A and B together;
- bad input: eps <= 0 / NaN / inf raises LDPError at construction; each `bad_values` input raises LDPError.
Every check is seeded, so a pass is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError, Mechanism, Reports

EPSILONS = (0.5, 1.0, 2.0, 4.0)
Z = 4.0  # standard errors allowed: two-sided false-alarm rate ~6e-5 per coordinate, and the checks are seeded
BAD_EPSILONS = (0.0, -1.0, float("nan"), float("inf"), "one")


@dataclass(frozen=True)
class MechanismCase:
    """How the contract checks exercise one mechanism."""

    name: str
    make: Callable[[float], Mechanism]
    sample_values: Callable[[np.random.Generator, int], np.ndarray]
    expected: Callable[[Mechanism, np.ndarray], np.ndarray]
    contributions: Callable[[Mechanism, Reports], np.ndarray]
    variance: Callable[[Mechanism, np.ndarray], np.ndarray]
    bad_values: Sequence[Any] = field(default_factory=tuple)
    n: int = 200_000

    def __str__(self) -> str:
        return self.name


def _as_columns(x: np.ndarray, n: int) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(n, -1)


def _simulate(case: MechanismCase, eps: float, seed: int = 0) -> tuple[Mechanism, np.ndarray, Reports]:
    rng = np.random.default_rng(seed)
    mech = case.make(eps)
    values = case.sample_values(rng, case.n)
    return mech, values, mech.perturb(values, rng)


def _slice(reports: Reports, rows: slice | np.ndarray) -> Reports:
    return {name: np.asarray(col)[rows] for name, col in reports.items()}


def check_schema(case: MechanismCase, eps: float) -> None:
    mech, values, reports = _simulate(case, eps, seed=1)
    reasons = mech.schema.violations(reports)
    assert (reasons == "").all(), f"{case}: reports outside the schema: {set(reasons) - {''}}"
    assert mech.accumulate(reports).shape == (mech.stats_size,)
    assert mech.empty_stats().shape == (mech.stats_size,)


def check_determinism(case: MechanismCase, eps: float) -> None:
    mech = case.make(eps)
    values = case.sample_values(np.random.default_rng(2), 1000)
    first = mech.perturb(values, np.random.default_rng(3))
    again = mech.perturb(values, np.random.default_rng(3))
    other = mech.perturb(values, np.random.default_rng(4))
    assert all(np.array_equal(first[k], again[k]) for k in first), f"{case}: same seed, different reports"
    assert any(not np.array_equal(first[k], other[k]) for k in first), f"{case}: different seeds, same reports"


def check_unbiased(case: MechanismCase, eps: float) -> None:
    mech, values, reports = _simulate(case, eps, seed=5)
    n = case.n
    truth = _as_columns(case.expected(mech, values), n).mean(axis=0)
    est = mech.estimate(mech.accumulate(reports))
    contributions = _as_columns(case.contributions(mech, reports), n)
    np.testing.assert_allclose(np.ravel(est.value), contributions.mean(axis=0), rtol=1e-9, atol=1e-12)
    stderr = np.sqrt(_as_columns(case.variance(mech, values), n).mean(axis=0) / n)
    z = np.abs(np.ravel(est.value) - truth) / stderr
    assert np.all(z <= Z), f"{case} eps={eps}: estimate off by {z.max():.2f} standard errors"


def check_variance(case: MechanismCase, eps: float) -> None:
    mech, values, reports = _simulate(case, eps, seed=6)
    n = case.n
    deviation2 = (_as_columns(case.contributions(mech, reports), n) - _as_columns(case.expected(mech, values), n)) ** 2
    closed_form = _as_columns(case.variance(mech, values), n).mean(axis=0)
    empirical = deviation2.mean(axis=0)
    own_stderr = deviation2.std(axis=0, ddof=1) / np.sqrt(n)
    z = np.abs(empirical - closed_form) / np.maximum(own_stderr, 1e-300)
    assert np.all(z <= Z), (
        f"{case} eps={eps}: empirical variance {empirical} vs closed form {closed_form} ({z.max():.2f} std errors)"
    )


def check_merge(case: MechanismCase, eps: float) -> None:
    mech, values, reports = _simulate(case, eps, seed=7)
    cut = case.n // 3
    parts = mech.accumulate(_slice(reports, slice(None, cut))) + mech.accumulate(_slice(reports, slice(cut, None)))
    np.testing.assert_allclose(parts, mech.accumulate(reports), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mech.empty_stats() + parts, parts)


def check_bad_input(case: MechanismCase, eps: float) -> None:
    for bad_eps in BAD_EPSILONS:
        with pytest.raises(LDPError):
            case.make(bad_eps)  # type: ignore[arg-type]
    mech = case.make(eps)
    for bad in case.bad_values:
        with pytest.raises(LDPError):
            mech.perturb(bad, np.random.default_rng(0))


CHECKS: tuple[Callable[[MechanismCase, float], None], ...] = (
    check_schema,
    check_determinism,
    check_unbiased,
    check_variance,
    check_merge,
    check_bad_input,
)


def run_all(case: MechanismCase, eps: float) -> None:
    """Every contract check on one mechanism at one epsilon."""
    for check in CHECKS:
        check(case, eps)
