"""The server's step on a round's mean gradient: SGD with momentum, and the exponential moving average (EMA) of the
iterates as the model it evaluates and serves. A pure function of the reports' means: post-processing, free of
privacy cost; the offline trainer (`federated`) uses it and a coordinator can too (state in, state out).

Update, per round t = 1, 2, ... with g_t the unbiased mean of the round's reports:
    v_t = mu v_{t-1} + g_t,    theta_t = theta_{t-1} - lr v_t                      (heavy ball; v_0 = 0)
    a_t = beta a_{t-1} + (1 - beta) theta_t,    served_t = a_t / (1 - beta^t)      (a_0 = 0)
so served_t = sum_{i<=t} w_i theta_i with w_i = (1 - beta) beta^(t-i) / (1 - beta^t), weights that sum to 1 (the
bias correction of Kingma and Ba's Adam, Sec. 3, applied to the iterates); beta = 0 serves the last iterate.

Why average. A round's mean of B reports carries noise with E||noise||^2 = MSE / B (PrivUnitG at d = 7,850 and
eps 8: 1,044 / 600 = 1.74, against a signal of norm at most 1). Near the optimum, along a direction of curvature h,
SGD with effective step eta = lr / (1 - mu) leaves the iterate spread with variance about eta s^2 / (2 h) (s^2 the
noise's variance in that direction) and correlated over about 1 / (eta h) rounds; a weighted mean over a window of
W = 1 / (1 - beta) rounds, W >> 1 / (eta h), divides that spread by about W eta h / 2 while adding a lag of about W
rounds of drift (Polyak and Juditsky, "Acceleration of stochastic approximation by averaging", SIAM J. Control
Optim. 30(4), 1992: averaging attains the optimal asymptotic variance whatever the step). The noise is then paid
once per window, not once per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ldpstream.sgd import SERVER_EMA as DEFAULT_EMA
from ldpstream.sgd import SERVER_LR as DEFAULT_LR
from ldpstream.sgd import SERVER_MOMENTUM as DEFAULT_MOMENTUM
from ldpstream.sgd.models import TrainingError


@dataclass(frozen=True)
class ServerState:
    """After t rounds: the SGD iterate theta_t, the velocity v_t and the EMA accumulator a_t (module docstring)."""

    theta: np.ndarray
    velocity: np.ndarray
    average: np.ndarray
    t: int


@dataclass(frozen=True)
class ServerOptimizer:
    """SGD with momentum `momentum` and step `lr`, serving the bias-corrected EMA of its iterates with decay `ema`
    (0: the last iterate)."""

    lr: float = DEFAULT_LR
    momentum: float = DEFAULT_MOMENTUM
    ema: float = DEFAULT_EMA

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise TrainingError(f"the server's learning rate must be finite and > 0, got {self.lr}")
        if not 0 <= self.momentum < 1 or not 0 <= self.ema < 1:
            raise TrainingError(f"momentum and EMA decay lie in [0, 1), got {self.momentum}, {self.ema}")

    def start(self, theta: np.ndarray) -> ServerState:
        """Round 0 at the initial model theta_0."""
        theta = np.array(theta, dtype=np.float64)
        return ServerState(theta, np.zeros_like(theta), np.zeros_like(theta), 0)

    def step(self, state: ServerState, mean_gradient: np.ndarray) -> ServerState:
        """Round t + 1 from the round's mean gradient (module docstring); the inputs are not modified."""
        g = np.asarray(mean_gradient, dtype=np.float64)
        if g.shape != state.theta.shape:
            raise TrainingError(f"the mean gradient has shape {g.shape}, the model {state.theta.shape}")
        velocity = self.momentum * state.velocity + g
        theta = state.theta - self.lr * velocity
        average = self.ema * state.average + (1.0 - self.ema) * theta
        return ServerState(theta, velocity, average, state.t + 1)

    def served(self, state: ServerState) -> np.ndarray:
        """The model the server evaluates and publishes: a_t / (1 - ema^t), theta_0 before the first round."""
        if state.t == 0 or self.ema == 0:
            return state.theta
        return state.average / (1.0 - self.ema**state.t)
