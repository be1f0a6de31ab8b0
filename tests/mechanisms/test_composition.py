"""The exact composition of k eps-DP releases against dp-accounting's privacy-loss distribution and the classics."""

from __future__ import annotations

import math

import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.composition import composed_epsilon, composition_delta


@pytest.mark.parametrize(("eps", "k"), [(1.0, 10), (0.1, 100)])
def test_matches_the_privacy_loss_distribution_of_k_pure_releases(eps: float, k: int) -> None:
    from dp_accounting.pld import common, privacy_loss_distribution

    pld = privacy_loss_distribution.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, 0.0))
    # the PLD of a pure pair is exact up to its 1e-4 loss grid, composed k times
    assert composed_epsilon(eps, k, 1e-5) == pytest.approx(pld.self_compose(k).get_epsilon_for_delta(1e-5), abs=1e-3)


def test_bounds_and_edges() -> None:
    assert composition_delta(1.0, 5, 5.0) == 0.0  # k eps-DP at delta 0: basic composition is exact there
    assert composition_delta(1.0, 1, 0.0) == pytest.approx(math.tanh(0.5))  # TV of randomized response
    for eps, k in [(2.0, 7), (0.05, 400)]:
        advanced = math.sqrt(2 * k * math.log(1e5)) * eps + k * eps * math.expm1(eps)  # Dwork, Rothblum, Vadhan
        assert composed_epsilon(eps, k, 1e-5) <= min(k * eps, advanced)
    with pytest.raises(LDPError):
        composed_epsilon(1.0, 0, 1e-5)
