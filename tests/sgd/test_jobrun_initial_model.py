"""A device job's model version 0 (`jobrun.initial_rng`): what the offline trainer starts from, the same for every
coordinator of the job."""

from __future__ import annotations

import numpy as np

from ldpstream.contract.networks import make_network
from ldpstream.sgd.jobfile import complete_job
from ldpstream.sgd.jobrun import initial_rng

FIELDS = {"version": 1, "mechanism": {"name": "privunitg"}, "clip": 1.0, "epsilon": 4.0, "max_rounds": 3,
          "batch_size": 2, "max_versions": 5, "lr": 0.5, "momentum": 0.0, "max_examples": 10,
          "version_validity_s": 3600}


def version_zero(job_id: str, architecture: str, dims: list[int]) -> np.ndarray:
    spec = complete_job({"job_id": job_id, "model": {"architecture": architecture, "dims": dims}, **FIELDS})
    return make_network(architecture, tuple(dims)).init(initial_rng(spec))


def test_an_mlp_starts_with_random_hidden_weights_so_its_hidden_layer_learns() -> None:
    theta = version_zero("mlp-job", "mlp", [6, 5, 3])
    hidden = theta[:6 * 5]
    assert np.all(hidden != 0) and np.all(np.abs(hidden) <= np.sqrt(6 / 6))  # He-uniform
    assert np.all(theta[6 * 5:] == 0)  # biases and the output layer: 0


def test_every_coordinator_of_a_job_makes_the_same_version_zero_and_another_job_another() -> None:
    assert np.array_equal(version_zero("mlp-job", "mlp", [6, 5, 3]), version_zero("mlp-job", "mlp", [6, 5, 3]))
    assert not np.array_equal(version_zero("mlp-job", "mlp", [6, 5, 3]), version_zero("mlp-job2", "mlp", [6, 5, 3]))


def test_a_softmax_starts_at_zero() -> None:
    assert not np.any(version_zero("soft-job", "softmax", [6, 3]))
