"""The in-process driver: each device at most once, the schedule, convergence on a small synthetic set."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from sgd_coordinator.datasets import synthetic
from sgd_coordinator.models import TrainingError
from sgd_coordinator.offline import train_offline
from sgd_coordinator.training import TrainingJob


def test_each_device_takes_part_at_most_once_and_the_population_runs_out() -> None:
    data = synthetic("svm", 1003, 5, seed=2)
    job = TrainingJob(model="svm", dims=5, epsilon=1.0, batch_size=10)
    run = train_offline(job, data.x, data.y, seed=4, private=False)
    assert run.stop_reason == "population_exhausted"
    assert run.iterations == 100  # floor(1003 / 10): the last 3 devices cannot fill a batch
    assert len(run.participants) == 1000 == len(np.unique(run.participants))
    assert set(run.participants) <= set(range(1003))


def test_max_iterations_stops_early_and_a_seed_fixes_the_device_order() -> None:
    data = synthetic("logistic", 500, 3, seed=1)
    job = TrainingJob(model="logistic", dims=3, epsilon=1.0, batch_size=20, max_iterations=7)
    first = train_offline(job, data.x, data.y, seed=9, private=False)
    again = train_offline(job, data.x, data.y, seed=9, private=False)
    assert first.stop_reason == "max_iterations" and first.iterations == 7 and len(first.participants) == 140
    np.testing.assert_array_equal(first.participants, again.participants)
    np.testing.assert_array_equal(first.trainer.params, again.trainer.params)


def test_non_private_logistic_converges_to_near_the_bayes_error() -> None:
    data = synthetic("logistic", 60_000, 10, seed=5)
    train, test = data.split(10_000, seed=0)
    job = TrainingJob(model="logistic", dims=10, epsilon=1.0, batch_size=50)
    run = train_offline(job, train.x, train.y, seed=0, private=False)
    assert data.true_beta is not None
    margin = expit(test.x @ data.true_beta)
    bayes = float(np.mean(np.minimum(margin, 1 - margin)))  # expected error of the true model's decisions
    # 1000 updates of 50 examples: within 2 points of the Bayes error (about 0.15 here); the sd of a rate on
    # 10k test rows is 0.0036, so the margin is mostly optimisation error, not test noise
    assert run.trainer.evaluate(test.x, test.y) < bayes + 0.02


def test_non_private_linear_regression_reaches_the_noise_floor() -> None:
    data = synthetic("linear", 40_000, 8, seed=6)
    train, test = data.split(10_000, seed=0)
    job = TrainingJob(model="linear", dims=8, epsilon=1.0, batch_size=30)
    mse = train_offline(job, train.x, train.y, seed=0, private=False).trainer.evaluate(test.x, test.y)
    assert mse < 1.2 * 0.1**2  # label noise variance 0.01; predicting 0 would give 0.1
    assert np.var(test.y) > 0.09


def test_bad_shapes_raise() -> None:
    job = TrainingJob(model="linear", dims=2, epsilon=1.0, batch_size=2)
    with pytest.raises(TrainingError):
        train_offline(job, np.zeros((4, 2)), np.zeros(3), private=False)
    with pytest.raises(TrainingError):
        train_offline(job, np.zeros((4, 3)), np.zeros(4), private=False)
