"""`ldp train --job FILE` (a training job's coordinator over Kafka) and `ldp train status JOB`.

A job file is YAML with a `job:` section (a `TrainingJob`) and, for simulated jobs, a `simulation:` section (where
the devices' private rows come from, and the held-out rows the model is evaluated on). `--devices N` also runs a
simulated fleet of N devices in this process (a thread beside the coordinator), for demos; `ldp train devices
--job FILE` runs the fleet alone, in a process of its own, for a coordinator running elsewhere.
`train_over_kafka_demo` is the same over a small synthetic logistic job, next to non-private SGD (`ldp demo`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from aggregator import metrics
from ldpstream.services import ServicesConfig
from sgd_coordinator.checkpoint import Checkpoint, JobState, RedisCheckpoint
from sgd_coordinator.coordinator import Coordinator, CoordinatorResult, Evaluator, VersionCallback
from sgd_coordinator.datasets import Dataset
from sgd_coordinator.devices import Fleet, FleetResult, Simulation
from sgd_coordinator.offline import train_offline
from sgd_coordinator.training import Trainer, TrainingJob

console = Console(width=None if Console().is_terminal else 120)
FLEET_IDLE_S = 10.0  # with an in-process fleet: stop waiting this long after the fleet has finished


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


def run_with_fleet(job: TrainingJob, simulation: Simulation, cfg: ServicesConfig, checkpoint: Checkpoint,
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
    """What `ldp train status` shows: version, gradients by outcome, parameters, and held-out evaluation of a
    simulated job."""
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
    }
    if state.metadata:
        simulation = Simulation.model_validate_json(state.metadata)
        _, test = simulation.data(state.job)
        summary["evaluation"] = {"held_out_rows": len(test.y), **held_out_evaluator(test)(trainer)}
    return summary


def train_job(ctx: typer.Context, job_file: Path, metrics_port: int | None) -> None:
    """`ldp train --job FILE [--devices N] [--seed S] [--json]`: run the job's coordinator in the foreground."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    try:
        spec = load_job_file(job_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    cfg = ServicesConfig.from_env()
    checkpoint = RedisCheckpoint(cfg.redis)
    if metrics_port is not None:
        metrics.serve(metrics_port)
    as_json = bool(ctx.params.get("as_json"))
    source = ctx.get_parameter_source("devices")  # typer's own click: compare the enum member by name
    with_fleet = source is not None and source.name == "COMMANDLINE"
    simulation = spec.simulation
    if with_fleet:
        simulation = (simulation or Simulation()).model_copy(update={"devices": ctx.params["devices"]})
    total = spec.job.max_iterations
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} versions"),
                  TimeElapsedColumn(), console=console, disable=as_json) as progress:
        task = progress.add_task(f"job {spec.job.job_id}", total=total)

        def on_version(state: JobState, evaluation: dict[str, float]) -> None:
            note = "".join(f", held-out {k} {v:.4f}" for k, v in evaluation.items() if not k.endswith("_stderr"))
            progress.update(task, completed=state.t, description=f"job {spec.job.job_id}: version {state.t}{note}")

        if with_fleet:
            assert simulation is not None
            run = run_with_fleet(spec.job, simulation, cfg, checkpoint, on_version=on_version)
            result = run.result
        else:
            coordinator = Coordinator(spec.job, cfg.bootstrap, checkpoint,
                                      simulation.model_dump_json() if simulation else "",
                                      held_out_evaluator(simulation.data(spec.job)[1]) if simulation else None)
            result = coordinator.run(on_version=on_version)
    summary = state_summary(result.state, checkpoint) | {"status": result.status}
    if as_json:
        typer.echo(json.dumps(summary))
        return
    console.print(_summary_text(summary))
    if result.status != "done":
        raise typer.Exit(1)


def _summary_text(summary: dict[str, Any]) -> str:
    lines = [f"job {summary['job']} ({summary['model']}, {summary['mechanism']}, eps = {summary['epsilon']}): "
             f"version {summary['iteration']} of g = {summary['batch_size']}, "
             + (f"done ({summary['stop_reason']})" if summary["done"] else "not done"),
             f"gradients: {summary['accepted']:,} accepted; dropped {summary['dropped'] or 'none'}; "
             f"rejected {summary['rejected'] or 'none'}"]
    if "evaluation" in summary:
        ev = summary["evaluation"]
        lines.append(f"held-out ({ev['held_out_rows']:,} rows): " + ", ".join(
            f"{k} {v:.4f} (stderr {ev[k + '_stderr']:.4f})" for k, v in ev.items() if k + "_stderr" in ev))
    return "\n".join(lines)


def status(job: str = typer.Argument(..., help="training job id"),
           as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """A job's iteration, gradients accepted and dropped by reason, parameters and held-out evaluation."""
    cfg = ServicesConfig.from_env()
    checkpoint = RedisCheckpoint(cfg.redis)
    state = checkpoint.load(job)
    if state is None:
        console.print(f"[red]error:[/] no training job {job!r}")
        raise typer.Exit(1)
    summary = state_summary(state, checkpoint)
    if as_json:
        typer.echo(json.dumps(summary))
        return
    console.print(_summary_text(summary))


def devices(job_file: Path = typer.Option(..., "--job", help="the job file (its simulation section)"),
            count: int = typer.Option(None, "--devices", min=1, help="devices (default: the simulation's)"),
            timeout_s: float = typer.Option(3600.0, help="give up after this many seconds")) -> None:
    """Run a job's simulated fleet (for a coordinator running elsewhere) until the job's final version."""
    try:
        spec = load_job_file(job_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    simulation = spec.simulation or Simulation()
    if count is not None:
        simulation = simulation.model_copy(update={"devices": count})
    train, _ = simulation.data(spec.job)
    cfg = ServicesConfig.from_env()
    fleet = Fleet(spec.job, train.x, train.y, cfg.bootstrap, seed=simulation.seed)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{len(train.y):,} devices of job {spec.job.job_id}", total=len(train.y))
        result = fleet.run(timeout_s=timeout_s, on_sent=lambda n: progress.advance(task, n))
    console.print(f"{result.sent:,} devices sent their gradient in {result.messages:,} messages; last version "
                  f"{result.last_version}" + (" (final)" if result.done else ""))


def train_over_kafka_demo(cfg: ServicesConfig, devices: int, seed: int) -> dict[str, Any]:
    """Train a small logistic model (d = 10, eps = 4, HM) over Kafka on `devices` simulated devices, and non-private
    SGD with the same devices, order and schedule; both evaluated on the same held-out rows."""
    job = TrainingJob(job_id=f"sgd-demo-{time.strftime('%Y%m%d-%H%M%S')}-{seed}", model="logistic", dims=10,
                      epsilon=4.0, mechanism="hm", batch_size=max(500, devices // 100), gamma0=2.0,
                      expected_population=devices)
    simulation = Simulation(devices=devices, test_rows=min(max(devices // 5, 1000), 100_000), seed=seed)
    run = run_with_fleet(job, simulation, cfg, RedisCheckpoint(cfg.redis))
    trainer = run.result.state.trainer()
    baseline = train_offline(job, run.train.x, run.train.y, seed, private=False).trainer
    return {"job": job.job_id, "model": job.model, "metric": trainer.model.metric_name,
            "private": trainer.evaluate(run.test.x, run.test.y),
            "non_private": baseline.evaluate(run.test.x, run.test.y), "iterations": trainer.t,
            "batch_size": job.mini_batch_size, "devices": devices, "epsilon": job.epsilon,
            "stop_reason": run.result.state.stop_reason, "seconds": run.seconds}


def register(group: typer.Typer) -> None:
    """Add `status` and `devices` to the `ldp train` command group."""
    group.command("status")(status)
    group.command("devices")(devices)
