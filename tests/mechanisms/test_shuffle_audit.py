"""The shuffle audit: its measured lower bound stays below the accountant's claim, the exact pair's epsilon too
(the reported epsilon never falls below a lower bound), and the test has the power to catch a false claim."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.mechanisms.shuffle import epsilon_for, variation_reduction
from ldpstream.mechanisms.shuffle_audit import _count_laws, audit_shuffle, pair_epsilon


@pytest.mark.parametrize(("epsilon0", "domain", "reports"), [(1.0, 2, 1000), (4.0, 2, 10_000), (4.0, 8, 20_000),
                                                            (8.0, 4, 5000)])
def test_lower_bounds_stay_below_the_claim(epsilon0: float, domain: int, reports: int) -> None:
    result = audit_shuffle(epsilon0, domain, reports, 1e-6, windows=3, samples=200_000, seed=1)
    assert result.within
    assert result.exact_epsilon <= result.claimed_epsilon
    assert result.claimed_epsilon <= result.composed_epsilon <= 3 * result.claimed_epsilon + 1e-9


def test_the_count_laws_are_distributions_with_the_right_means() -> None:
    p, q, n = 0.7, 0.1, 500
    a, b = _count_laws(p, q, n)
    k = np.arange(n + 1)
    assert a.sum() == pytest.approx(1) and b.sum() == pytest.approx(1)
    assert (k * a).sum() == pytest.approx(p + (n - 1) * q) and (k * b).sum() == pytest.approx(q + (n - 1) * q)


def test_a_false_claim_is_caught() -> None:
    """A crowd of 50 hides little: the measured bound exceeds a claim a tenth of the true one."""
    result = audit_shuffle(4.0, 2, 50, 1e-6, samples=400_000, seed=2)
    assert result.epsilon_lower_bound > result.exact_epsilon / 10
    assert result.epsilon_lower_bound > 0.3


def test_pair_epsilon_of_randomized_response_is_its_epsilon() -> None:
    """One report, no crowd: the pair (p, 1-p) vs (1-p, p) has epsilon ln(p / (1-p)) at delta 0+."""
    p = math.exp(2) / (1 + math.exp(2))
    assert pair_epsilon(np.array([p, 1 - p]), np.array([1 - p, p]), 1e-12) == pytest.approx(2, abs=1e-6)


def test_the_accountant_never_reports_below_the_exact_pair() -> None:
    """Property: over eps0, k and n, the variation bound at delta is at least the exact count test's epsilon."""
    rng = np.random.default_rng(3)
    for _ in range(12):
        eps0, k, n = float(rng.uniform(0.5, 6)), int(rng.integers(2, 10)), int(rng.integers(100, 20_000))
        e = math.exp(eps0)
        claimed = epsilon_for(variation_reduction(eps0, (e - 1) / (e + k - 1), 2 / (e + k - 1)), n, 1e-6)
        a, b = _count_laws(e / (e + k - 1), 1 / (e + k - 1), n)
        assert pair_epsilon(a, b, 1e-6) <= claimed + 1e-9
