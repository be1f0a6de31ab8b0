"""The analytic Gaussian reference: calibration to (eps, delta) and its per-report error against the closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gaussian import GaussianVector, analytic_sigma, gaussian_delta


@pytest.mark.parametrize(("eps", "delta"), [(0.5, 1e-5), (8.0, 1e-5), (16.0, 1e-6)])
def test_sigma_is_the_smallest_that_meets_delta(eps: float, delta: float) -> None:
    sigma = analytic_sigma(eps, delta)
    assert gaussian_delta(sigma, eps) <= delta < gaussian_delta(sigma * (1 - 1e-9), eps)
    classic = 2.0 * math.sqrt(2 * math.log(1.25 / delta)) / eps  # Dwork-Roth's sigma, valid for eps < 1
    assert eps >= 1 or sigma < classic


def test_reports_are_unbiased_with_the_closed_form_error() -> None:
    m = GaussianVector(50, 4.0, 1e-5)
    rng = np.random.default_rng(0)
    u = rng.standard_normal((4000, 50))
    u /= np.linalg.norm(u, axis=1)[:, None]
    err = m.perturb(u, rng) - u
    per_report = np.einsum("ij,ij->i", err, err)
    # ||noise||^2 / sigma^2 is chi-square with d degrees of freedom: sd of the mean of n is sigma^2 sqrt(2 d / n)
    assert abs(per_report.mean() - m.mse(50)) < 5 * m.sigma**2 * math.sqrt(2 * 50 / 4000)
    assert np.abs(m.mean(err)).max() < 5 * m.sigma / math.sqrt(4000)
    with pytest.raises(LDPError):
        m.perturb(2 * u, rng)
