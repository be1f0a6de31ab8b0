"""The pure parts of `ldp train --job` and `ldp train status`: job files, simulations, the status summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpstream.runtime.settings import PROJECT_ROOT
from ldpstream.sgd.checkpoint import GradientUpdate, MemoryCheckpoint
from ldpstream.sgd.devices import Simulation
from ldpstream.sgd.jobs import load_job_file, state_summary
from ldpstream.sgd.models import TrainingError
from ldpstream.sgd.training import TrainingJob


def test_the_example_job_file_is_valid() -> None:
    spec = load_job_file(PROJECT_ROOT / "examples" / "sgd_logistic.yaml")
    assert spec.job.model == "logistic" and spec.job.mini_batch_size == 2000 and spec.job.lam == 1e-4
    assert spec.simulation is not None and spec.simulation.devices == 200_000


@pytest.mark.parametrize(("text", "reason"), [
    ("job: {model: logistic, dims: 3}", "job.epsilon: Field required"),
    ("job: {model: logistic, dims: 3, epsilon: 1, batch_size: 4}\nextra: 1", "extra: Extra inputs"),
    ("job: {model: logistic, dims: 3, epsilon: 1, batch_size: 4}\nsimulation: {dataset: mnist}", "simulation.dataset"),
    ("job: [unclosed", "while parsing"),
])
def test_a_bad_job_file_is_named_with_its_reasons(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=reason):
        load_job_file(path)


def test_a_simulation_splits_devices_from_held_out_rows_and_checks_the_features() -> None:
    job = TrainingJob(model="svm", dims=4, epsilon=1.0, batch_size=10)
    train, test = Simulation(devices=500, test_rows=100, seed=2).data(job)
    assert (train.x.shape, test.x.shape) == ((500, 4), (100, 4))
    again, _ = Simulation(devices=500, test_rows=100, seed=2).data(job)
    np.testing.assert_array_equal(train.x, again.x)


def test_a_simulation_on_adult_needs_the_job_to_have_its_feature_count() -> None:
    pytest.importorskip("xai", reason="the Adult data ships in the 'data' extra")
    job = TrainingJob(model="logistic", dims=4, epsilon=1.0, batch_size=10)
    with pytest.raises(TrainingError, match="the adult data has [0-9]+ features, the job 4"):
        Simulation(dataset="adult", devices=1000, test_rows=100).data(job)


def test_the_status_summary_shows_version_outcomes_parameters_and_the_held_out_evaluation() -> None:
    job = TrainingJob(job_id="status", model="logistic", dims=3, epsilon=1.0, batch_size=2)
    store = MemoryCheckpoint()
    simulation = Simulation(devices=50, test_rows=20, seed=1)
    store.create(job, {}, simulation.model_dump_json())
    store.accumulate(GradientUpdate("status", "g:0", 0, 0, 0, 0, np.array([1, 2], np.uint64), np.array([2.0, 0, 0]),
                                    {"accepted": 2, "dropped:stale": 1, "rejected:out_of_range": 3}))
    state = store.load("status")
    assert state is not None
    store.advance("status", 0, state.trainer().apply_mean(state.gradient_sum / 2), None)
    state = store.load("status")
    assert state is not None
    summary = state_summary(state, store)
    assert summary["iteration"] == 1 and summary["accepted"] == 2 and not summary["done"]
    assert summary["dropped"] == {"stale": 1} and summary["rejected"] == {"out_of_range": 3}
    assert summary["params"] == [-1.0, 0.0, 0.0] == summary["beta"]  # gamma_1 = 1 times the mean [1, 0, 0]
    privacy = summary["privacy"]  # each device takes part once: its lifetime epsilon is the job's epsilon
    assert (privacy["participations_per_device"], privacy["lifetime_epsilon"], privacy["sampling_rate"]) == (1, 1.0,
                                                                                                           None)
    evaluation = summary["evaluation"]
    assert evaluation["held_out_rows"] == 20 and 0 <= evaluation["misclassification"] <= 1
    p = evaluation["misclassification"]
    assert evaluation["misclassification_stderr"] == pytest.approx(np.sqrt(p * (1 - p) / 20))
