"""Longitudinal mechanisms built from a spec's two budgets (`with_budgets`), their memo keys, and "auto".

That a class's claimed eps_1 and eps_inf are its true budgets is tested by enumerating the channels
(tests/mechanisms/test_longitudinal.py); here `with_budgets` must land on the requested pair.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.mechanisms import registry
from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.longitudinal.auto import TWO_STAGE, choose_longitudinal
from ldpstream.mechanisms.longitudinal.base import flip_for, flipped_epsilon
from ldpstream.mechanisms.longitudinal.memo import attribute_secrets, draw_secrets

NAMES = tuple(registry.LONGITUDINAL)
K = 6


def domain(name: str) -> int | None:
    return K if registry.takes_domain(name) else None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("lifetime", "first"), [(2.0, 1.0), (4.0, 0.5), (1.0, 0.6)])  # within L-OUE's reach
def test_with_budgets_lands_on_the_pair(name: str, lifetime: float, first: float) -> None:
    mech = registry.make_longitudinal(name, lifetime, first, domain(name))
    assert mech.epsilon == pytest.approx(first, rel=1e-9)
    assert mech.epsilon_lifetime == pytest.approx(lifetime, rel=1e-12)


@pytest.mark.parametrize(("name", "lifetime", "first"), [("l-oue", 2.0, 1.9), ("l-grr", 1.0, 1.0),
                                                        ("rappor", 1.0, 2.0), ("1bitmean", 1.0, 1.5)])
def test_unreachable_pairs_are_refused(name: str, lifetime: float, first: float) -> None:
    with pytest.raises(LDPError):
        registry.make_longitudinal(name, lifetime, first, domain(name))


def test_flip_for_inverts_flipped_epsilon() -> None:
    for eps, target in [(2.0, 0.5), (1.0, 1.0), (5.0, 0.01)]:
        assert flipped_epsilon(eps, flip_for(eps, target)) == pytest.approx(target, rel=1e-9)
    with pytest.raises(LDPError, match="must not exceed"):
        flip_for(1.0, 2.0)


@pytest.mark.parametrize("name", NAMES)
def test_memo_keys_name_the_memo_a_report_reads(name: str) -> None:
    mech = registry.make_longitudinal(name, 2.0, 1.0, domain(name))
    rng = np.random.default_rng(5)
    n = 2000
    values = rng.integers(0, K, n) if domain(name) else rng.uniform(-1, 1, n)
    secrets = draw_secrets(rng, n)
    keys = mech.memo_keys(values, secrets)
    assert keys.dtype == np.int64 and keys.shape == (n,)
    assert np.array_equal(keys, mech.memo_keys(values, secrets))  # a function of (device, value)
    if domain(name):
        assert np.array_equal(keys, values)  # frequency mechanisms memoize per value
    else:
        assert keys.min() >= 0 and keys.max() <= mech.buckets  # 1BitMean: the rounded grid point
        grid = (values + 1) * mech.buckets / 2
        assert ((keys == np.floor(grid)) | (keys == np.ceil(grid))).all()


def test_attribute_secrets_differ_per_attribute_and_are_stable() -> None:
    secrets = draw_secrets(np.random.default_rng(1), 1000)
    a, b = attribute_secrets(secrets, "os"), attribute_secrets(secrets, "app")
    assert np.array_equal(a, attribute_secrets(secrets, "os"))
    assert len(np.intersect1d(a, b)) == 0 and len(np.intersect1d(a, secrets)) == 0


def test_auto_picks_the_least_variance_two_stage_oracle() -> None:
    for lifetime, first, k in [(2.0, 1.0, 4), (2.0, 1.0, 64), (4.0, 1.0, 16), (2.0, 1.9, 8)]:
        chosen = choose_longitudinal("frequency", lifetime, first, k)
        variances = {}
        for name in TWO_STAGE:
            try:
                variances[name] = registry.make_longitudinal(name, lifetime, first, k).worst_case_variance()
            except LDPError:
                continue
        assert variances[chosen] <= min(variances.values()) * (1 + 1e-9)
    assert choose_longitudinal("numeric", 2.0, 1.0) == "1bitmean"
