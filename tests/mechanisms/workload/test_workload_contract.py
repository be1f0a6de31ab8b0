"""The shared mechanism contract checks (tests/mechanisms/checks.py), applied to FactorizationMechanism."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.mechanisms.base import Mechanism, Reports
from ldpstream.mechanisms.workload.baselines import hierarchical
from ldpstream.mechanisms.workload.mechanism import FactorizationMechanism
from tests.mechanisms.checks import CHECKS, EPSILONS, MechanismCase

N_TYPES = 8
CDF = np.tril(np.ones((N_TYPES, N_TYPES)))[:-1]  # the CDF at every point but the last (always 1, variance 0)
TYPE_WEIGHTS = np.array([8, 1, 4, 2, 6, 1, 1, 3]) / 26


def _mechanism(mech: Mechanism) -> FactorizationMechanism:
    assert isinstance(mech, FactorizationMechanism)
    return mech


def _contributions(mech: Mechanism, reports: Reports) -> np.ndarray:
    return _mechanism(mech).reconstruction()[:, reports["output"]].T


CASE = MechanismCase(
    name="factorization(hierarchical, cdf)",
    make=lambda eps: FactorizationMechanism(hierarchical(N_TYPES, eps), CDF, eps),
    sample_values=lambda rng, n: rng.choice(N_TYPES, size=n, p=TYPE_WEIGHTS),
    expected=lambda mech, values: _mechanism(mech).w[:, values].T,
    contributions=_contributions,
    variance=lambda mech, values: _mechanism(mech).user_variance()[:, values].T,
    bad_values=(np.array([N_TYPES]), np.array([-1]), np.array([1.5]), np.array([np.nan]), np.array([[0, 1]])),
)


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_contract(check, eps: float) -> None:
    check(CASE, eps)
