"""A training job and the pure mini-batch update of LDP SGD: the math both drivers (offline, Kafka) share.

One model version t is a `Trainer` (job, params, t). A device holding one private (x, y) computes
`Trainer.device_gradient(x, y)` at the published params (the gradient of the regularised loss, projected when
dimension reduction is on, clipped to [-1, 1]^k), perturbs it with the job's vector mechanism
(`gradient_mechanism(job)`), and sends only the perturbed vector. The coordinator gathers exactly g of them
for version t and calls `Trainer.apply`, which returns version t + 1 (000 Sec. V; 001 Sec. 4.2, Algorithm 4).

Privacy: each device takes part at most once per job and releases one output of an epsilon-LDP vector
mechanism whose input is its clipped gradient in [-1, 1]^k; everything the coordinator does with the reports
is post-processing, so the whole job is epsilon-LDP per device (000 Sec. V: "each user participates in at most
one iteration"; a second participation would cost another epsilon by composition, 001 Sec. 4.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from ldpstream.mechanisms.multidim import VectorMechanism, make_vector_mechanism
from ldpstream.sgd import GradientMechanism
from ldpstream.sgd.models import DEFAULT_LAMBDA, Model, TrainingError, make_model

CLIP = 1.0  # 000 Sec. V, "gradient clipping": every entry is clipped to [-1, 1] before perturbation


def batch_size_rule(dims: int, epsilon: float, population: int) -> int:
    """001 Sec. 5.3's mini-batch size g = max(2 d log d / eps^2, n / 1000), rounded up (at least 1).

    The paper does not name the base of the log; we use the natural log. It is the base of the bound it comes
    from: the averaged noisy gradient of g devices has per-coordinate variance about d / (eps^2 g) (001 Sec. 4.2,
    O(sqrt(d log d) / (eps sqrt(g))) overall), and the largest of d such Gaussian errors is about
    sqrt(d / (eps^2 g)) * sqrt(2 ln d), which is at most 1 exactly when g >= 2 d ln d / eps^2.
    With dimension reduction pass r for d (001 Sec. 5.3: g = max(2 r log r / eps^2, n / 1000)).
    """
    if dims < 1 or population < 1 or not (math.isfinite(epsilon) and epsilon > 0):
        raise TrainingError(
            f"batch size rule needs dims >= 1, population >= 1, eps > 0; got {dims}, {population}, {epsilon}"
        )
    return max(1, math.ceil(max(2.0 * dims * math.log(dims) / epsilon**2, population / 1000.0)))


@lru_cache(maxsize=16)
def projection_matrix(reduced_dims: int, dims: int, seed: int) -> np.ndarray:
    """001 Algorithm 4 line 1: the r x d matrix P with entries +1/d or -1/d, each with probability 1/2.

    The signs are the low bits of raw PCG64(seed) output, a stream numpy keeps stable across versions, so a
    coordinator and its devices that share only (r, d, seed) build the same P. Every row has L1 norm 1, so
    x' = P x lies in [-1, 1]^r whenever x lies in [-1, 1]^d (001 Sec. 4.2). Read-only.
    """
    if not 1 <= reduced_dims < dims:
        raise TrainingError(f"dimension reduction needs 1 <= r < d, got r={reduced_dims}, d={dims}")
    bits = np.random.PCG64(seed).random_raw(reduced_dims * dims) & np.uint64(1)
    matrix = (1.0 - 2.0 * bits.astype(np.float64)).reshape(reduced_dims, dims) / dims
    matrix.setflags(write=False)
    return matrix


class TrainingJob(BaseModel):
    """The parameters of one LDP mini-batch SGD job (000 Sec. V, 001 Sec. 4.2 and Algorithm 4).

    The mini-batch size g is `batch_size` if given, else `batch_size_rule` from `expected_population`.
    With `reduced_dims` = r (MGD-DR, 001 Sec. 4.2) devices project x onto r dimensions with
    `projection_matrix(r, dims, projection_seed)` and the model is trained in those r dimensions.
    Stop rules: `max_iterations`, fewer than g unused devices left, or an update whose L2 norm is below
    `tolerance` (0 turns that rule off). Gradients computed on a version more than `max_staleness` behind
    the current one are stale: dropped and counted (default 0: only the current version is accepted).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(default="offline", min_length=1)
    model: Literal["linear", "logistic", "svm"]
    dims: int = Field(ge=1)
    lam: float = Field(
        default=DEFAULT_LAMBDA,
        ge=0,
        allow_inf_nan=False,
        validation_alias=AliasChoices("lambda", "lam"),
        serialization_alias="lambda",
    )
    epsilon: float = Field(gt=0, allow_inf_nan=False)
    mechanism: GradientMechanism = "hm"
    batch_size: int | None = Field(default=None, ge=1)
    expected_population: int | None = Field(default=None, ge=1)
    gamma0: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    reduced_dims: int | None = Field(default=None, ge=1)
    projection_seed: int = Field(default=0, ge=0, lt=2**63)
    max_iterations: int | None = Field(default=None, ge=1)
    tolerance: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    max_staleness: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> TrainingJob:
        if self.batch_size is None and self.expected_population is None:
            raise ValueError("give batch_size, or expected_population for the batch size rule of 001 Sec. 5.3")
        if self.reduced_dims is not None and self.reduced_dims >= self.dims:
            raise ValueError(f"reduced_dims must be < dims, got r={self.reduced_dims}, d={self.dims}")
        return self

    @property
    def gradient_dims(self) -> int:
        """k: the length of a device's gradient (r with dimension reduction, else d)."""
        return self.reduced_dims if self.reduced_dims is not None else self.dims

    @property
    def mini_batch_size(self) -> int:
        """g: the number of device gradients averaged per update."""
        if self.batch_size is not None:
            return self.batch_size
        assert self.expected_population is not None  # the validator guarantees one of the two
        return batch_size_rule(self.gradient_dims, self.epsilon, self.expected_population)

    def learning_rate(self, update: int) -> float:
        """gamma_t = gamma0 / sqrt(t) for the t-th update, t = 1, 2, ... (000 Sec. V; 001 Alg. 4 line 13)."""
        if update < 1:
            raise TrainingError(f"updates are numbered from 1, got {update}")
        return self.gamma0 / math.sqrt(update)


def gradient_mechanism(job: TrainingJob) -> VectorMechanism:
    """The job's epsilon-LDP vector mechanism over [-1, 1]^k (000 Alg. 4 for 'pm' and 'hm')."""
    return make_vector_mechanism(job.mechanism, job.epsilon, job.gradient_dims)


@dataclass(frozen=True, eq=False)
class Trainer:
    """Model version t of a job: params are alpha in R^r with dimension reduction, else beta in R^d.

    Examples
    --------
    >>> job = TrainingJob(model="linear", dims=2, epsilon=1.0, batch_size=2)
    >>> v0 = Trainer.start(job)
    >>> grads = v0.device_gradient(np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([0.5, 0.5]))
    >>> grads.tolist()  # 2 (x^T beta - y) x at beta = 0
    [[-1.0, 0.0], [0.0, 1.0]]
    >>> v1 = v0.apply(grads)  # the coordinator's update (here with exact, non-private gradients)
    >>> v1.t, v1.params.tolist()
    (1, [0.5, -0.5])
    """

    job: TrainingJob
    params: np.ndarray
    t: int = 0
    last_step: float = math.inf

    def __post_init__(self) -> None:
        params = np.array(self.params, dtype=np.float64)
        if params.shape != (self.job.gradient_dims,) or not np.isfinite(params).all():
            raise TrainingError(f"params must be {self.job.gradient_dims} finite numbers, got shape {params.shape}")
        if self.t < 0:
            raise TrainingError(f"model version must be >= 0, got {self.t}")
        params.setflags(write=False)
        object.__setattr__(self, "params", params)

    @classmethod
    def start(cls, job: TrainingJob) -> Trainer:
        """Version 0: all-zero parameters."""
        return cls(job, np.zeros(job.gradient_dims))

    @cached_property
    def model(self) -> Model:
        return make_model(self.job.model, self.job.lam)

    @property
    def projection(self) -> np.ndarray | None:
        """P (r x d) under dimension reduction, else None."""
        job = self.job
        return None if job.reduced_dims is None else projection_matrix(job.reduced_dims, job.dims, job.projection_seed)

    @property
    def beta(self) -> np.ndarray:
        """The model in the original d features: P^T alpha with dimension reduction, since (P x)^T alpha =
        x^T (P^T alpha); else params itself."""
        return self.params if self.projection is None else self.projection.T @ self.params

    def device_features(self, x: np.ndarray) -> np.ndarray:
        """What a device trains on: x' = P x per row with dimension reduction (001 Alg. 4 line 7), else x."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.job.dims:
            raise TrainingError(f"features must have shape (n, {self.job.dims}), got {x.shape}")
        return x if self.projection is None else x @ self.projection.T

    def device_gradient(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per device (row): the gradient of ell'(params; x', y) clipped to [-1, 1]^k (000 Sec. V; 001 Alg. 4
        lines 7-9). Under dimension reduction this is the gradient in alpha: grad_alpha ell(alpha; P x, y) + lambda
        alpha = P grad_beta ell(beta; x, y) at beta = P^T alpha, plus lambda alpha."""
        y = np.asarray(y, dtype=np.float64)
        self.model.check_labels(y)
        return np.clip(self.model.gradients(self.params, self.device_features(x), y), -CLIP, CLIP)

    def apply(self, noisy_gradients: np.ndarray) -> Trainer:
        """Version t + 1: params - gamma_{t+1} * mean of exactly g gradients (000 Sec. V; 001 Alg. 4 lines 13-14)."""
        grads = np.asarray(noisy_gradients, dtype=np.float64)
        expected = (self.job.mini_batch_size, self.job.gradient_dims)
        if grads.shape != expected:
            raise TrainingError(f"an update takes gradients of shape {expected}, got {grads.shape}")
        return self.apply_mean(grads.mean(axis=0))

    def apply_mean(self, mean_gradient: np.ndarray) -> Trainer:
        """Version t + 1 from the mean of version t's g gradients (the Kafka coordinator keeps their running sum):
        params - gamma_{t+1} * mean (000 Sec. V; 001 Alg. 4 lines 13-14)."""
        mean = np.asarray(mean_gradient, dtype=np.float64)
        if mean.shape != (self.job.gradient_dims,):
            raise TrainingError(f"a mean gradient has shape ({self.job.gradient_dims},), got {mean.shape}")
        if not np.isfinite(mean).all():
            raise TrainingError("gradients must be finite")
        step = self.job.learning_rate(self.t + 1) * mean
        return Trainer(self.job, self.params - step, self.t + 1, float(np.linalg.norm(step)))

    def is_stale(self, version: int) -> bool:
        """Whether a gradient computed at model `version` is too old for this version (drop and count it)."""
        return self.t - version > self.job.max_staleness

    def stop_reason(self, devices_left: int | None = None) -> str | None:
        """Why training stops at this version, or None: 'max_iterations', 'converged' (last update smaller than
        the tolerance) or 'population_exhausted' (fewer than g devices left that have not taken part)."""
        if self.job.max_iterations is not None and self.t >= self.job.max_iterations:
            return "max_iterations"
        if self.last_step < self.job.tolerance:
            return "converged"
        if devices_left is not None and devices_left < self.job.mini_batch_size:
            return "population_exhausted"
        return None

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> float:
        """The model's metric (MSE or misclassification rate) on held-out rows with d original features."""
        return self.model.metric(self.beta, x, y)
