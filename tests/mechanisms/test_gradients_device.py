"""The device's update randomizers (`ldpstream.mechanisms.gradients.device`, protocol section 13.5) draw from the same
laws as the server mechanisms: seeded simulation of n reports, unbiased (every coordinate's mean within 5 standard
errors of x) and with PrivUnitG's closed-form error E||x_hat - x||^2 = MSE + 1 - ||x||^2 (privunit's docstring),
within 5 standard errors of the n squared errors' mean."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.gradients.device import (
    GeneratorUniforms,
    ScriptedUniforms,
    cap_ratio,
    cap_scale,
    privunitg_report,
    projunit_report,
    uniforms_needed,
)
from ldpstream.mechanisms.gradients.privunit import PrivUnitG, optimal_cap
from ldpstream.mechanisms.gradients.projunit import ProjUnit

N = 4000


def reports(make: object, n: int) -> np.ndarray:
    return np.stack([make() for _ in range(n)])  # type: ignore[operator]


@pytest.mark.parametrize("norm", [1.0, 0.6, 0.0])
def test_privunitg_from_uniforms_is_unbiased_with_the_closed_form_error(norm: float) -> None:
    d, eps = 16, 4.0
    cap = optimal_cap("gaussian", eps, d)
    x = np.random.default_rng(1).normal(size=d)
    x *= norm / max(np.linalg.norm(x), 1e-300)
    source = GeneratorUniforms(np.random.default_rng(2))
    out = reports(lambda: privunitg_report(x, cap.p, cap.q, source)["value"][0].astype(float), N)
    errors = out - x
    z = errors.mean(axis=0) / (errors.std(axis=0, ddof=1) / np.sqrt(N))
    assert np.abs(z).max() < 5.0
    squared = (errors**2).sum(axis=1)
    expected = PrivUnitG(dims=d, epsilon=eps).mse() + 1.0 - norm**2
    assert abs(squared.mean() - expected) < 5.0 * squared.std(ddof=1) / np.sqrt(N)


def test_projunit_from_uniforms_decodes_unbiased() -> None:
    d, k, eps = 16, 16, 4.0  # k = d' = 16: W is a rotation, no normalisation bias (projunit's docstring)
    cap = optimal_cap("gaussian", eps, k)
    mech = ProjUnit(dims=d, epsilon=eps, k=k)
    x = np.random.default_rng(3).normal(size=d)
    x *= 0.8 / np.linalg.norm(x)
    source = GeneratorUniforms(np.random.default_rng(4))
    rows = [projunit_report(x, k, cap.p, cap.q, source) for _ in range(N)]
    decoded = mech.decode({"seed": np.concatenate([r["seed"] for r in rows]),
                           "value": np.concatenate([r["value"] for r in rows])})
    errors = decoded - x
    z = errors.mean(axis=0) / (errors.std(axis=0, ddof=1) / np.sqrt(N))
    assert np.abs(z).max() < 5.0


def test_the_cap_keeps_epsilon_and_the_draws_are_counted() -> None:
    cap = optimal_cap("gaussian", 2.0, 10)
    assert cap_ratio(cap.p, cap.q) == pytest.approx(np.exp(2.0), rel=1e-9)
    assert cap_scale(cap.p, cap.q)[1] == pytest.approx(cap.scale, rel=1e-12)
    assert uniforms_needed("privunitg", 7) == 3 + 8 and uniforms_needed("projunit", 100, 16) == 3 + 16
    with pytest.raises(LDPError):
        cap_ratio(1.0, 0.5)
    with pytest.raises(LDPError):  # a vector outside the unit ball is not clipped
        privunitg_report(np.full(4, 1.0), cap.p, cap.q, ScriptedUniforms([0.5] * 20))
    with pytest.raises(LDPError):  # the scripted uniforms run out
        privunitg_report(np.zeros(4), cap.p, cap.q, ScriptedUniforms([0.5] * 3))
