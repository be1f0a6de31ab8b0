"""Strategy matrices: eps-LDP of every baseline, V Q = W, the variance formulas (closed form and simulation), bounds."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.mechanisms.base import LDPError
from ldpstream.mechanisms.workload.baselines import (
    baseline_strategies,
    fourier,
    fourier_order,
    hadamard_response,
    hierarchical,
    randomized_response,
    rappor,
    subset_selection,
)
from ldpstream.mechanisms.workload.optimize import objective_and_gradient
from ldpstream.mechanisms.workload.strategy import (
    LDP_RTOL,
    SINGULAR_RCOND,
    average_case_objective,
    check_factorization,
    check_ldp,
    check_strategy,
    evaluate,
    factorize,
    normal_cholesky,
    privacy_loss,
    reconstruction,
    sample_complexity,
    svd_lower_bound,
)
from ldpstream.mechanisms.workload.workloads import WORKLOAD_NAMES, histogram, prefix, workload_by_name

EPSILONS = [0.5, 1.0, 2.0, 4.0]
# lambda_min / lambda_max of Q^T D^-1 Q: at or above CLEARLY_INVERTIBLE the trace form of L_avg is accurate to
# ~ ulp / ratio < 1e-9; at or below CLEARLY_SINGULAR the matrix is singular up to rounding (a rank-deficient Q gives
# ~1e-16). A case in between would be too close to call on some BLAS: the tests refuse it instead of guessing.
CLEARLY_INVERTIBLE, CLEARLY_SINGULAR = 1e-6, 1e-14


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("n", [8, 12, 32])
def test_every_baseline_is_an_exact_eps_ldp_strategy(n: int, eps: float) -> None:
    strategies = baseline_strategies(prefix(n), eps)
    assert {"randomized_response", "hadamard", "hierarchical"} <= set(strategies)
    assert ("fourier" in strategies) == (n != 12)
    for name, q in strategies.items():
        check_strategy(q, eps)
        loss = privacy_loss(q)
        # each row holds values in the ratio e^eps exactly (RAPPOR: (e^(eps/2))^2), so the loss is eps, not less
        assert eps * (1 - 1e-12) <= loss <= eps * (1 + LDP_RTOL), name


def test_small_domains_also_get_rappor_and_subset_selection() -> None:
    strategies = baseline_strategies(histogram(6), 1.0)
    assert strategies["rappor"].shape == (64, 6)
    assert strategies["subset_selection"].shape == (15, 6)  # d = ceil(6 / (e + 1)) = 2
    assert "rappor" not in baseline_strategies(histogram(32), 1.0)


def test_ldp_check_rejects_a_strategy_for_a_smaller_epsilon() -> None:
    q = randomized_response(8, 1.0)
    check_ldp(q, 1.0)
    with pytest.raises(LDPError, match="violates"):
        check_ldp(q, 0.99)
    with pytest.raises(LDPError, match="violates"):
        check_ldp(np.array([[1.0, 0.0], [0.0, 1.0]]), 5.0)
    with pytest.raises(LDPError, match="sums to"):
        check_strategy(q[:, :] * 1.01, 1.0)
    with pytest.raises(LDPError, match="negative"):
        check_strategy(np.array([[1.5, 0.5], [-0.5, 0.5]]), 1.0)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_optimal_reconstruction_factorizes_the_workload(name: str) -> None:
    workload = workload_by_name(name, 16)
    w = workload.matrix()
    for q in baseline_strategies(workload, 1.0).values():
        v = reconstruction(q, w)
        check_factorization(v, q, w)
        with pytest.raises(LDPError, match="not a factorization"):
            check_factorization(v * 1.001, q, w)


def test_fourier_order_follows_the_workload() -> None:
    assert fourier_order(workload_by_name("3way_marginals", 32)) == 3
    assert fourier_order(workload_by_name("all_marginals", 32)) == 5
    assert fourier_order(workload_by_name("histogram", 32)) == 5
    # a 1-way Fourier strategy cannot answer 3-way marginals
    with pytest.raises(LDPError, match="row space"):
        factorize(fourier(16, 1.0, 1), workload_by_name("3way_marginals", 16).gram)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_type_variances_equal_the_explicit_formula(name: str) -> None:
    """c_u = column sums of (V o V) Q - W o W with an explicit V* (Thm. 3.3), and the trace form of L_avg (Thm. 3.8)."""
    workload = workload_by_name(name, 16)
    w = workload.matrix()
    for label, q in baseline_strategies(workload, 2.0).items():
        v = reconstruction(q, w)
        explicit = ((v * v) @ q - w * w).sum(axis=0)
        fact = factorize(q, workload.gram)
        np.testing.assert_allclose(fact.type_variances, explicit, rtol=1e-9)
        np.testing.assert_allclose(fact.average_case_variance, explicit.mean(), rtol=1e-9)
        # The trace form needs Q^T D^-1 Q invertible (3way_marginals' Fourier strategy spans 15 of 16 dimensions).
        evals = np.linalg.eigvalsh(q.T @ (q / q.sum(axis=1, keepdims=True)))
        ratio = evals[0] / evals[-1]
        assert ratio >= CLEARLY_INVERTIBLE or ratio <= CLEARLY_SINGULAR, f"{label}: ratio {ratio:.1e}, too close"
        if ratio >= CLEARLY_INVERTIBLE:
            np.testing.assert_allclose(average_case_objective(q, workload.gram), explicit.mean(), rtol=1e-9)
        else:
            assert average_case_objective(q, workload.gram) == np.inf


def test_a_singular_normal_matrix_counts_as_singular_under_any_rounding() -> None:
    """Q^T D^-1 Q singular in exact arithmetic: inf (and a zero gradient) whether rounding makes Cholesky fail or
    pass with a tiny pivot. Different BLAS kernels are emulated by relative perturbations of Q of a few ulps (on
    our machine about a third of them make a bare Cholesky fail, the others leave rcond ~ 4e-17)."""
    twin = hadamard_response(8, 1.0)  # 16 outputs, rank 8
    twin = np.column_stack([twin, twin[:, 0]])  # a ninth type that reports like the first
    cases = [twin, fourier(16, 1.0, 3), fourier(16, 2.0, 3), fourier(16, 4.0, 3)]  # Fourier: 15 of 16 dimensions
    rng = np.random.default_rng(8)
    for q in cases:
        gram = np.eye(q.shape[1])
        for _ in range(25):
            noisy = q * (1.0 + 4 * np.finfo(np.float64).eps * rng.standard_normal(q.shape))
            assert normal_cholesky(noisy)[1] is None
            assert average_case_objective(noisy, gram) == np.inf
            value, grad = objective_and_gradient(noisy, gram)
            assert value == np.inf and not grad.any()


def test_an_ill_conditioned_but_invertible_normal_matrix_is_answered() -> None:
    """A ninth type that is almost the first (rcond ~1e-7, far above SINGULAR_RCOND): L_avg is finite and agrees
    with `factorize`'s eigendecomposition to the precision the conditioning leaves, and so does the objective."""
    q = hadamard_response(8, 1.0)  # 16 outputs, rank 8
    elsewhere = np.random.default_rng(9).dirichlet(np.ones(16))  # a distribution outside the span of the columns
    q = np.column_stack([q, 0.999 * q[:, 0] + 0.001 * elsewhere])
    gram = np.eye(9)
    scaled, factor = normal_cholesky(q)
    assert factor is not None
    evals = np.linalg.eigvalsh(q.T @ scaled)
    assert evals[0] / evals[-1] > 1e3 * SINGULAR_RCOND
    expected = factorize(q, gram).average_case_variance
    rtol = 1e3 * np.finfo(np.float64).eps * evals[-1] / evals[0]  # forward error of the solves ~ ulp * condition
    assert average_case_objective(q, gram) == pytest.approx(expected, rel=rtol)
    assert objective_and_gradient(q, gram)[0] == pytest.approx(expected, rel=rtol)


@pytest.mark.parametrize("eps", EPSILONS)
def test_randomized_response_matches_the_grr_variance(eps: float) -> None:
    """Independent closed form: the GRR count estimator has per-user total variance n q(1-q)/(p-q)^2 + (1-p-q)/(p-q)."""
    n = 20
    e = np.exp(eps)
    p, q = e / (e + n - 1), 1 / (e + n - 1)
    expected = n * q * (1 - q) / (p - q) ** 2 + (1 - p - q) / (p - q)
    report = evaluate(randomized_response(n, eps), histogram(n))
    assert report.worst_case_variance == pytest.approx(expected, rel=1e-10)
    assert report.average_case_variance == pytest.approx(expected, rel=1e-10)
    assert report.sample_complexity == pytest.approx(expected / (n * 0.01), rel=1e-10)


def test_hierarchical_matches_a_direct_construction() -> None:
    """n = 16, B = 4: levels of 16, 4 nodes; level l repeats the oracle column of node u // 4^l."""
    q = hierarchical(16, 1.0)
    top = hadamard_response(4, 1.0)
    expected = np.vstack([hadamard_response(16, 1.0), top[:, [u // 4 for u in range(16)]]]) / 2
    np.testing.assert_array_equal(q, expected)


def test_hadamard_response_in_the_high_privacy_regime_is_one_block() -> None:
    # eps = 0.5: B = 1 block, b = 2^ceil(log2(n + 1)) = 16 for n = 8: the rows of H_16, columns 1..8
    q = hadamard_response(8, 0.5)
    assert q.shape == (16, 8)
    low, high = q.min(), q.max()
    assert high == pytest.approx(np.exp(0.5) * low, rel=1e-12)  # two values, in the ratio e^eps
    assert np.all(np.isclose(q, low, rtol=1e-12, atol=0) | np.isclose(q, high, rtol=1e-12, atol=0))


@pytest.mark.parametrize(
    ("strategy", "data"),
    [
        (randomized_response(6, 3.0), np.array([500, 0, 100, 0, 0, 400])),
        (hierarchical(8, 1.0), np.array([0, 0, 0, 1000, 0, 0, 0, 0])),
        (fourier(8, 0.5, 3), np.array([100, 200, 0, 300, 50, 50, 200, 100])),
        (subset_selection(5, 1.0), np.array([10, 20, 30, 40, 900])),
        (rappor(4, 2.0), np.array([250, 250, 250, 250])),
    ],
)
@pytest.mark.parametrize("name", ["prefix", "histogram"])
def test_simulated_variance_matches_the_formula(strategy: np.ndarray, data: np.ndarray, name: str) -> None:
    """R seeded repetitions of N users: mean of V y within 5 standard errors of W x, total variance within 5 sd.

    Each estimate is a sum of N independent users, close to normal, so a sample variance over R repetitions has
    relative standard deviation sqrt(2 / (R - 1)); a sum of such (correlated) variances has at most that.
    """
    reps = 4000
    workload = workload_by_name(name, len(data))
    w = workload.matrix()
    fact = factorize(strategy, workload.gram)
    rng = np.random.default_rng(7)
    # responses of every type's users, all repetitions at once: (reps, n, m) -> (reps, m)
    y = rng.multinomial(data, strategy.T, size=(reps, len(data))).sum(axis=1)
    v = w @ fact.recon
    estimates = y @ v.T
    per_query = estimates.var(axis=0, ddof=1)
    expected = ((v * v) @ strategy - w * w) @ data  # per query: sum_u x_u (sum_o V[i,o]^2 Q[o,u] - W[i,u]^2)
    assert abs(per_query.sum() / expected.sum() - 1) < 5 * np.sqrt(2 / (reps - 1))
    assert expected.sum() == pytest.approx(float(data @ fact.type_variances))
    error = estimates.mean(axis=0) - w @ data
    exact = expected < 1e-9 * expected.max()  # e.g. the last prefix query, the total count
    assert np.abs(error[exact]).max(initial=0) < 1e-6
    assert np.abs(error[~exact] / np.sqrt(expected[~exact] / reps)).max() < 5


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("eps", EPSILONS)
def test_svd_lower_bound_is_below_every_mechanism(name: str, eps: float) -> None:
    workload = workload_by_name(name, 32)
    bound = svd_lower_bound(workload, eps)
    for label, q in baseline_strategies(workload, eps).items():
        report = evaluate(q, workload)
        assert bound <= report.average_case_variance * (1 + 1e-9), label
        assert report.average_case_variance <= report.worst_case_variance * (1 + 1e-12), label


def test_svd_lower_bound_is_tight_for_randomized_response_on_a_two_type_histogram() -> None:
    """n = 2, W = I: RR has L = 2 q(1-q)/(p-q)^2 + (1-p-q)/(p-q) = 2e/(e-1)^2 (p + q = 1); the bound is 4/e^eps - 2)/2.

    Both must agree with the formulas, and the bound must stay below RR for all eps.
    """
    for eps in EPSILONS:
        e = np.exp(eps)
        assert svd_lower_bound(histogram(2), eps) == pytest.approx((4 / e - 2) / 2)
        assert evaluate(randomized_response(2, eps), histogram(2)).worst_case_variance == pytest.approx(
            2 * e / (e - 1) ** 2
        )


def test_sample_complexity_is_proportional_to_worst_case_variance() -> None:
    assert sample_complexity(50.0, 10) == pytest.approx(500.0)
    assert sample_complexity(50.0, 10, alpha=0.1) == pytest.approx(50.0)
