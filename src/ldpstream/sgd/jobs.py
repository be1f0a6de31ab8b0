"""Training jobs from files, and simulated runs: a coordinator with its simulated fleet of devices beside it.

A job file is YAML with a `job:` section (a `TrainingJob`) and, for simulated jobs, a `simulation:` section (where
the devices' private rows come from, and the held-out rows the model is evaluated on). `run_with_fleet` runs a
job's coordinator with its simulated fleet in a thread beside it until the job is done; `state_summary` is what
`ldp train status` shows; `train_over_kafka_demo` trains a small synthetic logistic job next to non-private SGD
(`ldp demo`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ldpstream.runtime.settings import Settings
from ldpstream.sgd.accounting import job_privacy
from ldpstream.sgd.checkpoint import Checkpoint, JobState, RedisCheckpoint
from ldpstream.sgd.coordinator import Coordinator, CoordinatorResult, Evaluator, VersionCallback
from ldpstream.sgd.datasets import Dataset
from ldpstream.sgd.devices import Fleet, FleetResult, Simulation
from ldpstream.sgd.offline import train_offline
from ldpstream.sgd.training import Trainer, TrainingJob

FLEET_IDLE_S = 10.0  # with an in-process fleet: stop waiting this long after the fleet has finished
MAX_TEST_ROWS = 100_000


def held_out_rows(devices: int) -> int:
    """Rows kept apart for evaluation next to N training devices: N/5, at least 1,000, at most 100,000."""
    return min(max(devices // 5, 1000), MAX_TEST_ROWS)


class JobFile(BaseModel):
    """A job file: the training job and, for a simulated job, its simulation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: TrainingJob
    simulation: Simulation | None = None


def load_job_file(path: Path) -> JobFile:
    """Parse a job file; ValueError with the reasons if it is not valid."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    try:
        return JobFile.model_validate(raw)
    except ValidationError as exc:
        reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {reasons}") from exc


def held_out_evaluator(test: Dataset) -> Evaluator:
    """The held-out mean loss and the model's metric (misclassification or MSE) of a model version, each with
    its standard error over the n held-out rows (the per-row values' standard deviation / sqrt(n))."""
    n = len(test.y)

    def evaluate(trainer: Trainer) -> dict[str, float]:
        model, name = trainer.model, trainer.model.metric_name
        losses = model.loss(trainer.beta, test.x, test.y)
        metric = trainer.evaluate(test.x, test.y)
        per_row = losses if name == "mse" else model.predict(trainer.beta, test.x) != test.y
        return {"loss": float(losses.mean()), "loss_stderr": float(losses.std() / np.sqrt(n)), name: metric,
                f"{name}_stderr": float(np.std(per_row) / np.sqrt(n))}

    return evaluate


@dataclasses.dataclass(frozen=True)
class SimulatedRun:
    """A coordinator run with an in-process fleet: how it ended, what the fleet sent, wall time, held-out rows."""

    result: CoordinatorResult
    fleet: FleetResult | None
    seconds: float
    train: Dataset
    test: Dataset


def run_with_fleet(job: TrainingJob, simulation: Simulation, cfg: Settings, checkpoint: Checkpoint,
                   on_version: VersionCallback | None = None) -> SimulatedRun:
    """Run the job's coordinator here and its simulated fleet in a thread until the job is done. If the fleet has
    sent all its devices and no gradient came for FLEET_IDLE_S, the job's population is exhausted: it finishes."""
    train, test = simulation.data(job)
    coordinator = Coordinator(job, cfg.bootstrap, checkpoint, simulation.model_dump_json(),
                              held_out_evaluator(test))
    fleet = Fleet(job, train.x, train.y, cfg.bootstrap, seed=simulation.seed)
    stop = threading.Event()
    fleet_result: list[FleetResult] = []
    thread = threading.Thread(target=lambda: fleet_result.append(fleet.run(stop)), name="sgd-fleet", daemon=True)
    started = time.perf_counter()
    thread.start()
    try:
        idle = IdleWatch(coordinator, FLEET_IDLE_S)
        result = coordinator.run(on_version=on_version, should_stop=lambda: idle() and not thread.is_alive())
    finally:
        stop.set()
        thread.join(timeout=30)
    if result.status != "done" and fleet.used == len(train.y):
        result = CoordinatorResult(coordinator.finish("population_exhausted"), "done")
        if on_version:
            on_version(result.state, coordinator.last_evaluation)
    return SimulatedRun(result, fleet_result[0] if fleet_result else None, time.perf_counter() - started, train,
                        test)


class IdleWatch:
    """Called repeatedly: True once the coordinator's version and gradient count have not moved for `idle_s`."""

    def __init__(self, coordinator: Coordinator, idle_s: float) -> None:
        self.coordinator = coordinator
        self.idle_s = idle_s
        self.mark: tuple[int, int] | None = None
        self.since = time.monotonic()

    def __call__(self) -> bool:
        state = self.coordinator.state
        mark = (state.t, state.count) if state else None
        if mark != self.mark:
            self.mark, self.since = mark, time.monotonic()
        return time.monotonic() - self.since > self.idle_s


def state_summary(state: JobState, checkpoint: Checkpoint) -> dict[str, Any]:
    """What `ldp train status` shows: version, gradients by outcome, a device's privacy over the job (each device
    takes part once: `ldpstream.sgd.accounting`), parameters, and held-out evaluation of a simulated job."""
    outcomes = checkpoint.outcomes(state.job.job_id)
    trainer = state.trainer()
    summary: dict[str, Any] = {
        "job": state.job.job_id, "model": state.job.model, "mechanism": state.job.mechanism,
        "epsilon": state.job.epsilon, "iteration": state.t, "batch_size": state.job.mini_batch_size,
        "gradients_in_current_version": state.count, "done": state.done, "stop_reason": state.stop_reason or None,
        "accepted": outcomes.get("accepted", 0),
        "dropped": {k.partition(":")[2]: n for k, n in sorted(outcomes.items()) if k.startswith("dropped:")},
        "rejected": {k.partition(":")[2]: n for k, n in sorted(outcomes.items()) if k.startswith("rejected:")},
        "params": trainer.params.tolist(), "beta": trainer.beta.tolist(),
        "privacy": job_privacy(state.job.epsilon, 1, None if state.job.expected_population is None else min(
            1.0, state.job.mini_batch_size / state.job.expected_population)),
    }
    if state.metadata:
        simulation = Simulation.model_validate_json(state.metadata)
        _, test = simulation.data(state.job)
        summary["evaluation"] = {"held_out_rows": len(test.y), **held_out_evaluator(test)(trainer)}
    return summary


def train_over_kafka_demo(cfg: Settings, devices: int, seed: int,
                          on_iteration: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Train a small logistic model (d = 10, eps = 4, HM) over Kafka on `devices` simulated devices, and non-private
    SGD with the same devices, order and schedule; both evaluated on the same held-out rows. `on_iteration(t, total)`
    at each published version t (of about `total`: the population's mini-batches)."""
    job = TrainingJob(job_id=f"sgd-demo-{time.strftime('%Y%m%d-%H%M%S')}-{seed}", model="logistic", dims=10,
                      epsilon=4.0, mechanism="hm", batch_size=max(500, devices // 100), gamma0=2.0,
                      expected_population=devices)
    simulation = Simulation(devices=devices, test_rows=held_out_rows(devices), seed=seed)
    total = max(1, devices // job.mini_batch_size)
    run = run_with_fleet(job, simulation, cfg, RedisCheckpoint(cfg.redis),
                         on_version=None if on_iteration is None else lambda state, _: on_iteration(state.t, total))
    trainer = run.result.state.trainer()
    baseline = train_offline(job, run.train.x, run.train.y, seed, private=False).trainer
    return {"job": job.job_id, "model": job.model, "metric": trainer.model.metric_name,
            "private": trainer.evaluate(run.test.x, run.test.y),
            "non_private": baseline.evaluate(run.test.x, run.test.y), "iterations": trainer.t,
            "batch_size": job.mini_batch_size, "devices": devices, "epsilon": job.epsilon,
            "stop_reason": run.result.state.stop_reason, "seconds": run.seconds}
