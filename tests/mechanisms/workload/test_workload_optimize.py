"""Strategy optimiser: the bounded-simplex projection, the analytic gradient, determinism, and the paper's findings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.baselines import baseline_strategies, randomized_response
from ldpstream.mechanisms.workload.optimize import (
    initial_strategy,
    objective_and_gradient,
    optimize_strategy,
    project_bounded_simplex,
    z_gradient,
)
from ldpstream.mechanisms.workload.strategy import check_strategy, evaluate, svd_lower_bound
from ldpstream.mechanisms.workload.workloads import WORKLOAD_NAMES, prefix, workload_by_name


def bisection_projection(r: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Slow reference: per column, bisect for the lambda with sum(clip(r + lambda, lower, upper)) = 1."""
    out = np.empty_like(r)
    for j in range(r.shape[1]):
        lo, hi = (lower - r[:, j]).min() - 1.0, (upper - r[:, j]).max() + 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.clip(r[:, j] + mid, lower, upper).sum() < 1.0 else (lo, mid)
        out[:, j] = np.clip(r[:, j] + (lo + hi) / 2, lower, upper)
    return out


@st.composite
def projection_problems(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = draw(st.integers(1, 9))
    n = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    lower = rng.random(m) * draw(st.floats(0.0, 1.0)) / m  # sum(lower) <= 1
    upper = lower + rng.random(m) * draw(st.floats(0.01, 3.0))
    if upper.sum() < 1.0:
        upper = lower + (upper - lower) * (1.0 - lower.sum()) / (upper - lower).sum() * 1.001
    scale = draw(st.sampled_from([1e-3, 1.0, 100.0]))
    return rng.normal(size=(m, n)) * scale, lower, upper


@settings(max_examples=150, deadline=None, derandomize=True)
@given(projection_problems())
def test_projection_matches_bisection_and_is_feasible(problem) -> None:
    r, lower, upper = problem
    p = project_bounded_simplex(r, lower, upper)
    assert (p >= lower[:, None]).all() and (p <= upper[:, None]).all()
    np.testing.assert_allclose(p.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(p, bisection_projection(r, lower, upper), atol=1e-9)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(projection_problems(), st.integers(0, 2**32 - 1))
def test_projection_is_the_closest_feasible_point(problem, seed: int) -> None:
    """Idempotent on the set, and no other feasible point (projections of random matrices) is closer to R."""
    r, lower, upper = problem
    p = project_bounded_simplex(r, lower, upper)
    np.testing.assert_allclose(project_bounded_simplex(p, lower, upper), p, atol=1e-12)
    others = project_bounded_simplex(np.random.default_rng(seed).normal(size=(r.shape[0], 20)), lower, upper)
    for j in range(r.shape[1]):
        own = np.linalg.norm(p[:, j] - r[:, j])
        assert (np.linalg.norm(others - r[:, [j]], axis=0) >= own - 1e-9).all()


def test_projection_rejects_an_empty_box() -> None:
    with pytest.raises(LDPError, match="empty"):
        project_bounded_simplex(np.zeros((3, 2)), np.full(3, 0.5), np.ones(3))  # sum(lower) > 1
    with pytest.raises(LDPError, match="empty"):
        project_bounded_simplex(np.zeros((3, 2)), np.zeros(3), np.full(3, 0.3))  # sum(upper) < 1


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_analytic_gradient_matches_finite_differences(name: str) -> None:
    workload = workload_by_name(name, 8)
    rng = np.random.default_rng(3)
    q = initial_strategy(8, 1.0, 32, rng)
    value, grad = objective_and_gradient(q, workload.gram)
    assert value == pytest.approx(evaluate(q, workload).average_case_variance, rel=1e-9)
    for _ in range(3):
        direction = rng.normal(size=q.shape)
        h = 1e-6 * np.abs(q).max() / np.abs(direction).max()
        plus, _ = objective_and_gradient(q + h * direction, workload.gram)
        minus, _ = objective_and_gradient(q - h * direction, workload.gram)
        assert (plus - minus) / (2 * h) == pytest.approx(np.sum(grad * direction), rel=1e-5)


def test_z_gradient_is_the_derivative_through_the_projection() -> None:
    """d L(project(R, z, e^eps z)) / dz by finite differences equals z_gradient (same clipping pattern)."""
    workload, eps = prefix(6), 1.0
    rng = np.random.default_rng(5)
    q = initial_strategy(6, eps, 24, rng)
    _, grad = objective_and_gradient(q, workload.gram)
    r = q - 1e-4 * grad / np.abs(grad).max() * q.min()
    z = np.full(24, q.min())
    projected = project_bounded_simplex(r, z, np.exp(eps) * z)
    _, grad_p = objective_and_gradient(projected, workload.gram)
    analytic = z_gradient(projected, z, grad_p, eps)
    for o in range(0, 24, 5):
        dz = np.zeros(24)
        dz[o] = 1e-9 * z[o]
        up = objective_and_gradient(project_bounded_simplex(r, z + dz, np.exp(eps) * (z + dz)), workload.gram)[0]
        down = objective_and_gradient(project_bounded_simplex(r, z - dz, np.exp(eps) * (z - dz)), workload.gram)[0]
        assert (up - down) / (2 * dz[o]) == pytest.approx(analytic[o], rel=1e-4, abs=1e-6 * np.abs(analytic).max())


def test_optimizer_is_deterministic_given_a_seed_and_returns_an_ldp_strategy() -> None:
    workload = prefix(16)
    first = optimize_strategy(workload, 1.0, seed=11, iters=60, warm_start=False)
    again = optimize_strategy(workload, 1.0, seed=11, iters=60, warm_start=False)
    other = optimize_strategy(workload, 1.0, seed=12, iters=60, warm_start=False)
    np.testing.assert_array_equal(first.q, again.q)
    assert first.q.shape != other.q.shape or not np.array_equal(first.q, other.q)
    check_strategy(first.q, 1.0)
    assert first.q.shape[1] == 16 and first.q.shape[0] <= 64
    assert first.worst_case_variance == pytest.approx(evaluate(first.q, workload).worst_case_variance)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_random_start_beats_every_baseline_at_n32(name: str) -> None:
    """The paper's method alone (random start, Sec. 4) needs fewer samples than every baseline at eps = 1."""
    workload = workload_by_name(name, 32)
    result = optimize_strategy(workload, 1.0, warm_start=False)
    assert result.start == "random"
    for label, q in baseline_strategies(workload, 1.0).items():
        assert result.worst_case_variance < evaluate(q, workload).worst_case_variance, label
    assert svd_lower_bound(workload, 1.0) <= result.average_case_variance <= result.worst_case_variance


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("eps", [0.5, 2.0, 4.0])
def test_optimized_needs_no_more_samples_than_any_baseline(name: str, eps: float) -> None:
    """Sec. 6.2 at n = 32: strictly better at eps <= 2; at eps = 4 no worse, and within 1% of randomized response."""
    workload = workload_by_name(name, 32)
    result = optimize_strategy(workload, eps)
    check_strategy(result.q, eps)
    baselines = {
        label: evaluate(q, workload).worst_case_variance for label, q in baseline_strategies(workload, eps).items()
    }
    for label, worst in baselines.items():
        if eps <= 2.0:
            assert result.worst_case_variance < worst, label
        else:
            assert result.worst_case_variance <= worst * (1 + 1e-9), label
    if eps == 4.0:
        assert result.worst_case_variance >= 0.5 * baselines["randomized_response"]


def test_warm_start_keeps_randomized_response_at_large_epsilon() -> None:
    workload = workload_by_name("histogram", 16)
    rr = evaluate(randomized_response(16, 4.0), workload).worst_case_variance
    result = optimize_strategy(workload, 4.0, iters=100)
    assert result.worst_case_variance <= rr * (1 + 1e-9)
    assert result.random_start_worst_case >= result.worst_case_variance
