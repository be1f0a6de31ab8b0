"""The in-process driver: LDP mini-batch SGD over simulated devices, vectorised over each mini-batch.

It runs the same `Trainer` math as the Kafka coordinator. Devices come online in a random order; iteration i
takes the next g devices that have not taken part (each device at most once per job), computes their clipped
gradients at version i, perturbs them with the job's vector mechanism (or not, for the non-private baseline),
and applies the update. The non-private baseline with the same seed sees the same devices in the same order
and the same learning-rate schedule; only the perturbation is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpstream.sgd.datasets import Dataset
from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.training import Trainer, TrainingJob, gradient_mechanism


@dataclass(frozen=True)
class OfflineRun:
    """The outcome of one offline job: the final model version, who took part, and why it stopped."""

    trainer: Trainer
    participants: np.ndarray  # device row indices in the order their gradients were applied (g per iteration)
    stop_reason: str

    @property
    def iterations(self) -> int:
        return self.trainer.t


def train_offline(job: TrainingJob, x: np.ndarray, y: np.ndarray, seed: int = 0, private: bool = True) -> OfflineRun:
    """Train `job` on the devices whose private rows are (x, y); `private=False` skips the perturbation."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise TrainingError(f"expected x (n, d) and y (n,), got {x.shape} and {y.shape}")
    order_seed, noise_seed = np.random.SeedSequence(seed).spawn(2)
    order = np.random.default_rng(order_seed).permutation(x.shape[0])  # the order devices come online
    noise_rng = np.random.default_rng(noise_seed)
    mechanism = gradient_mechanism(job) if private else None
    g = job.mini_batch_size
    trainer = Trainer.start(job)
    used = 0
    while (reason := trainer.stop_reason(devices_left=x.shape[0] - used)) is None:
        batch = order[used : used + g]
        gradients = trainer.device_gradient(x[batch], y[batch])
        if mechanism is not None:
            gradients = mechanism.perturb_dense(gradients, noise_rng)
        trainer = trainer.apply(gradients)
        used += g
    return OfflineRun(trainer, order[:used], reason)


@dataclass(frozen=True)
class Comparison:
    """A private model and its non-private twin (same devices, order and schedule) on the same held-out rows."""

    model: str
    metric: str
    private: float
    non_private: float
    iterations: int
    batch_size: int


def compare_offline(job: TrainingJob, train: Dataset, test: Dataset, seed: int = 0) -> Comparison:
    """Train `job` privately and non-privately on `train` with one seed and evaluate both on `test`."""
    private = train_offline(job, train.x, train.y, seed, private=True).trainer
    baseline = train_offline(job, train.x, train.y, seed, private=False).trainer
    return Comparison(
        model=job.model,
        metric=private.model.metric_name,
        private=private.evaluate(test.x, test.y),
        non_private=baseline.evaluate(test.x, test.y),
        iterations=private.t,
        batch_size=job.mini_batch_size,
    )
