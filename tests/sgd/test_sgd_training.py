"""The job spec and the pure update step shared by both drivers (000 Sec. V, 001 Sec. 4.2 and Algorithm 4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.training import Trainer, TrainingJob, batch_size_rule, projection_matrix


def _job(**overrides: object) -> TrainingJob:
    spec: dict[str, object] = {"model": "logistic", "dims": 4, "epsilon": 1.0, "batch_size": 3}
    spec.update(overrides)
    return TrainingJob.model_validate(spec)


def test_batch_size_rule_uses_the_natural_log_and_the_population_floor() -> None:
    assert batch_size_rule(90, 1.0, 1000) == math.ceil(2 * 90 * math.log(90))  # 809.97 -> 810
    assert batch_size_rule(90, 1.0, 1000) == 810
    assert batch_size_rule(10, 4.0, 1_000_000) == 1000  # n/1000 = 1000 > 2 * 10 * ln 10 / 16 = 2.88
    assert batch_size_rule(20, 0.5, 1000) == math.ceil(2 * 20 * math.log(20) / 0.25)  # r = 20 under MGD-DR
    assert batch_size_rule(1, 2.0, 10) == 1  # ln 1 = 0 and 10/1000 rounds up to 1
    with pytest.raises(TrainingError):
        batch_size_rule(10, 0.0, 100)


def test_job_resolves_its_batch_size_from_the_population() -> None:
    assert _job(batch_size=None, expected_population=10**6, dims=10, epsilon=4).mini_batch_size == 1000
    dr = _job(model="linear", dims=90, reduced_dims=20, batch_size=None, expected_population=1000)
    assert dr.gradient_dims == 20
    assert dr.mini_batch_size == batch_size_rule(20, 1.0, 1000)
    assert _job(batch_size=7, expected_population=10**6).mini_batch_size == 7  # explicit wins


@pytest.mark.parametrize(
    "overrides",
    [
        {"batch_size": None},  # neither a batch size nor a population
        {"reduced_dims": 4},  # r must be < d
        {"epsilon": 0.0},
        {"epsilon": float("inf")},
        {"model": "ridge"},
        {"mechanism": "rappor"},
        {"dims": 0},
        {"gamma0": -1.0},
        {"unknown_field": 1},
    ],
)
def test_bad_jobs_are_rejected_with_a_message(overrides: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _job(**overrides)


def test_job_reads_lambda_from_a_json_spec() -> None:
    job = TrainingJob.model_validate_json('{"model": "svm", "dims": 3, "epsilon": 2, "batch_size": 5, "lambda": 0.01}')
    assert job.lam == 0.01 and job.mechanism == "hm" and job.gamma0 == 1.0
    assert _job().lam == 1e-4  # 000 Sec. VI-B


def test_learning_rate_schedule() -> None:
    job = _job(gamma0=0.5)
    assert [job.learning_rate(t) for t in (1, 4, 100)] == [0.5, 0.25, 0.05]
    with pytest.raises(TrainingError):
        job.learning_rate(0)


def test_device_gradient_is_clipped_to_the_unit_box() -> None:
    job = _job(model="linear", dims=3)
    trainer = Trainer(job, np.array([5.0, -5.0, 0.0]))
    x = np.array([[1.0, -1.0, 0.05], [0.01, 0.0, 0.0]])
    y = np.array([-1.0, 0.0])
    raw = trainer.model.gradients(trainer.params, x, y)
    clipped = trainer.device_gradient(x, y)
    np.testing.assert_array_equal(clipped, np.clip(raw, -1, 1))
    assert np.abs(raw).max() > 1 and np.abs(clipped).max() == 1.0
    assert clipped[1, 1] == raw[1, 1]  # entries already inside [-1, 1] are untouched
    with pytest.raises(TrainingError):
        trainer.device_gradient(x, np.array([-1.0, 2.0]))  # label outside [-1, 1]


def test_projection_matrix_entries_rows_and_determinism() -> None:
    p = projection_matrix(20, 90, seed=7)
    assert p.shape == (20, 90)
    assert set(np.unique(p)) == {-1 / 90, 1 / 90}
    np.testing.assert_allclose(np.abs(p).sum(axis=1), 1.0)  # so P x stays in [-1, 1]^r
    np.testing.assert_array_equal(p, projection_matrix(20, 90, seed=7))
    assert not np.array_equal(p, projection_matrix(20, 90, seed=8))
    # 1800 fair signs: their mean has sd 1/sqrt(1800) = 0.024; 5 sd = 0.12 bounds it for any seed but a freak one
    assert abs(np.sign(p).mean()) < 5 / math.sqrt(1800)
    with pytest.raises(TrainingError):
        projection_matrix(90, 90, 0)


def test_dimension_reduction_round_trip() -> None:
    """x'^T alpha = x^T (P^T alpha), and the alpha-gradient is P times the beta-gradient at beta = P^T alpha."""
    rng = np.random.default_rng(3)
    job = _job(model="linear", dims=50, reduced_dims=8, batch_size=4, projection_seed=11, lam=0.0)
    trainer = Trainer(job, rng.normal(0, 1, 8))
    x = rng.uniform(-1, 1, (30, 50))
    y = rng.uniform(-1, 1, 30)
    p = trainer.projection
    assert p is not None
    reduced = trainer.device_features(x)
    assert reduced.shape == (30, 8) and np.abs(reduced).max() <= 1.0
    np.testing.assert_allclose(reduced @ trainer.params, x @ trainer.beta)
    np.testing.assert_allclose(trainer.beta, p.T @ trainer.params)
    grad_alpha = trainer.model.gradients(trainer.params, reduced, y)
    grad_beta = trainer.model.gradients(trainer.beta, x, y)
    np.testing.assert_allclose(grad_alpha, grad_beta @ p.T)
    np.testing.assert_allclose(trainer.device_gradient(x, y), np.clip(grad_alpha, -1, 1))
    assert trainer.evaluate(x, y) == pytest.approx(np.mean((reduced @ trainer.params - y) ** 2))


def test_apply_is_the_mini_batch_update() -> None:
    job = _job(gamma0=2.0)
    start = Trainer(job, np.array([1.0, 0.0, 0.0, -1.0]))
    grads = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.0, 1.0]])
    one = start.apply(grads)
    np.testing.assert_allclose(one.params, start.params - 2.0 * grads.mean(axis=0))
    assert one.t == 1 and one.last_step == pytest.approx(2.0 * np.linalg.norm(grads.mean(axis=0)))
    two = one.apply(grads)
    np.testing.assert_allclose(two.params, one.params - 2.0 / math.sqrt(2) * grads.mean(axis=0))
    np.testing.assert_array_equal(start.params, [1.0, 0.0, 0.0, -1.0])  # versions are immutable
    with pytest.raises(ValueError):
        start.params[0] = 3.0
    with pytest.raises(TrainingError, match="shape"):
        start.apply(grads[:2])  # an update takes exactly g gradients
    with pytest.raises(TrainingError, match="finite"):
        start.apply(np.full((3, 4), np.nan))
    with pytest.raises(TrainingError):
        Trainer(job, np.zeros(3))


def test_stop_rules_and_staleness() -> None:
    job = _job(max_iterations=2, tolerance=1e-3, max_staleness=1)
    trainer = Trainer.start(job)
    assert trainer.stop_reason(devices_left=10) is None
    assert trainer.stop_reason(devices_left=2) == "population_exhausted"  # fewer than g = 3 left
    small = trainer.apply(np.full((3, 4), 1e-5))
    assert small.stop_reason(devices_left=10) == "converged"
    assert small.apply(np.ones((3, 4))).stop_reason() == "max_iterations"
    at_five = Trainer(job, np.zeros(4), t=5)
    assert [at_five.is_stale(v) for v in (5, 4, 3)] == [False, False, True]
    assert Trainer(_job(), np.zeros(4), t=5).is_stale(4)  # default: only the current version counts
