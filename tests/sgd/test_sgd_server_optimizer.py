"""The server's optimizer: heavy-ball SGD, and its served model is exactly the bias-corrected EMA of the iterates,
whose spread on a noisy quadratic matches the closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.server_optimizer import ServerOptimizer


def test_steps_are_heavy_ball_and_the_served_model_is_the_weighted_mean_of_the_iterates() -> None:
    rng = np.random.default_rng(0)
    lr, mu, beta, rounds = 0.3, 0.5, 0.9, 25
    server = ServerOptimizer(lr, mu, beta)
    state = server.start(rng.standard_normal(4))
    theta, velocity, iterates = state.theta.copy(), np.zeros(4), []
    for _ in range(rounds):
        g = rng.standard_normal(4)
        state = server.step(state, g)
        velocity = mu * velocity + g
        theta = theta - lr * velocity
        iterates.append(theta)
        np.testing.assert_allclose(state.theta, theta, rtol=1e-13)
    weights = (1 - beta) * beta ** np.arange(rounds - 1, -1, -1) / (1 - beta**rounds)
    assert math.isclose(weights.sum(), 1.0, rel_tol=1e-12)
    np.testing.assert_allclose(server.served(state), weights @ np.array(iterates), rtol=1e-12)
    assert state.t == rounds


def test_the_inputs_are_not_modified_and_a_constant_iterate_is_served_as_is() -> None:
    server = ServerOptimizer(1.0, 0.0, 0.99)
    start = server.start(np.array([1.0, 2.0]))
    assert np.array_equal(server.served(start), [1.0, 2.0])  # round 0: the initial model
    state = server.step(start, np.zeros(2))
    assert np.array_equal(start.theta, [1.0, 2.0]) and start.t == 0
    for _ in range(10):
        state = server.step(state, np.zeros(2))
    np.testing.assert_allclose(server.served(state), [1.0, 2.0], rtol=1e-14)  # the weights sum to 1
    last = ServerOptimizer(1.0, 0.0, 0.0)
    assert np.array_equal(last.served(last.step(last.start(np.ones(2)), np.ones(2))), [0.0, 0.0])


def test_bad_settings_and_shapes_are_refused() -> None:
    for lr, mu, beta in [(0.0, 0.5, 0.9), (math.inf, 0.5, 0.9), (1.0, 1.0, 0.9), (1.0, 0.5, 1.0), (1.0, -0.1, 0)]:
        with pytest.raises(TrainingError):
            ServerOptimizer(lr, mu, beta)
    server = ServerOptimizer()
    with pytest.raises(TrainingError):
        server.step(server.start(np.zeros(3)), np.zeros(4))


def test_the_ema_cuts_the_spread_of_noisy_sgd_as_its_closed_form_says() -> None:
    # Each of n coordinates is an independent run of SGD (momentum 0) on h x^2 / 2 with gradient noise N(0, s^2):
    # theta_t = rho theta_{t-1} - lr s xi_t, rho = 1 - lr h, an AR(1) of stationary variance
    # V = lr^2 s^2 / (1 - rho^2). Its EMA a = (1 - beta) sum_k beta^k theta_{t-k} has variance
    # (1 - beta)^2 V sum_{k,l} beta^(k+l) rho^|k-l| = (1 - beta)^2 V (1 + rho beta) / ((1 - beta^2) (1 - rho beta)).
    n, lr, h, s, beta, rounds = 10_000, 0.5, 0.2, 1.0, 0.98, 1_000  # beta^rounds < 2e-9
    rho = 1 - lr * h
    last_var = lr**2 * s**2 / (1 - rho**2)
    ema_var = (1 - beta) ** 2 * last_var * (1 + rho * beta) / ((1 - beta**2) * (1 - rho * beta))
    rng = np.random.default_rng(1)
    server = ServerOptimizer(lr, 0.0, beta)
    state = server.start(np.zeros(n))
    for _ in range(rounds):
        state = server.step(state, h * state.theta + s * rng.standard_normal(n))
    # the sample variance of n independent normals has relative standard error sqrt(2 / n) = 1.4%: allow 5 of them
    tolerance = 5 * math.sqrt(2 / n)
    assert abs(state.theta.var() / last_var - 1) < tolerance
    assert abs(server.served(state).var() / ema_var - 1) < tolerance
    assert ema_var < last_var / 6  # the point of it: here the EMA's spread is 1/6.2 of the last iterate's
