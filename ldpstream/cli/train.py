"""`ldp train`: LDP mini-batch SGD. `ldp train --offline ...` runs the in-process driver over simulated devices.

`train` is a command group, so that the Kafka commands (`ldp train --job FILE`, `ldp train status JOB`) sit beside
the offline mode.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from ldpstream.cli import train_kafka
from sgd_coordinator.datasets import Dataset, adult, synthetic
from sgd_coordinator.offline import compare_offline
from sgd_coordinator.training import GRADIENT_MECHANISMS, TrainingJob

MAX_TEST_ROWS = 100_000


def held_out_rows(devices: int) -> int:
    """Rows kept apart for evaluation next to N training devices: N/5, at least 1,000, at most 100,000."""
    return min(max(devices // 5, 1000), MAX_TEST_ROWS)


def _data(model: str, use_synthetic: bool, census: bool, devices: int, dims: int, seed: int) -> tuple[Dataset, Dataset]:
    if use_synthetic == census:
        raise typer.BadParameter("pass exactly one of --synthetic and --census")
    if use_synthetic:
        if devices < 1 or dims < 1:
            raise typer.BadParameter("--devices and --dims must be >= 1")
        test_rows = held_out_rows(devices)
        return synthetic(model, devices + test_rows, dims, seed).split(test_rows, seed)
    data = adult(model)
    return data.split(len(data.y) // 10, seed)


def train(
    ctx: typer.Context,
    offline: Annotated[bool, typer.Option("--offline", help="run in process over simulated devices")] = False,
    model: Annotated[str, typer.Option(help="linear, logistic or svm")] = "logistic",
    use_synthetic: Annotated[bool, typer.Option("--synthetic", help="a synthetic set with a known model")] = False,
    census: Annotated[bool, typer.Option("--census", help="the UCI Adult census data (extra 'data')")] = False,
    devices: Annotated[int, typer.Option(help="devices (synthetic; with --job: a fleet of them)")] = 100_000,
    dims: Annotated[int, typer.Option(help="number of features d (synthetic)")] = 10,
    epsilon: Annotated[float, typer.Option(help="privacy budget per device")] = 1.0,
    mechanism: Annotated[str, typer.Option(help=f"gradient mechanism: {', '.join(GRADIENT_MECHANISMS)}")] = "hm",
    batch_size: Annotated[int | None, typer.Option(help="mini-batch size g (default: 001's rule)")] = None,
    reduced_dims: Annotated[int | None, typer.Option(help="dimension reduction to r (MGD-DR)")] = None,
    gamma0: Annotated[float, typer.Option(help="learning rate gamma_t = gamma0 / sqrt(t)")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the data, the device order and the noise")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    job_file: Annotated[Path | None, typer.Option("--job", help="run a job file's coordinator over Kafka")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="with --job: serve Prometheus metrics here")] = None,
) -> None:
    """Train a model by LDP mini-batch SGD and compare it with non-private SGD on the same held-out rows."""
    if ctx.invoked_subcommand is not None:
        return
    if job_file is not None:
        return train_kafka.train_job(ctx, job_file, metrics_port)
    if not offline:
        raise typer.BadParameter("pass --offline (in process) or --job FILE (over Kafka)")
    try:
        train_set, test_set = _data(model, use_synthetic, census, devices, dims, seed)
        job = TrainingJob(
            model=model,  # type: ignore[arg-type]  # validated by pydantic
            dims=train_set.dims,
            epsilon=epsilon,
            mechanism=mechanism,  # type: ignore[arg-type]
            batch_size=batch_size,
            expected_population=len(train_set.y),
            reduced_dims=reduced_dims,
            gamma0=gamma0,
        )
        result = compare_offline(job, train_set, test_set, seed)
    except ValidationError as exc:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise typer.BadParameter(message) from exc
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result)))
    else:
        typer.echo(
            f"{result.model} on {len(train_set.y)} devices, d = {train_set.dims}, eps = {epsilon}, {mechanism}: "
            f"{result.iterations} iterations of g = {result.batch_size}; held-out {result.metric} "
            f"{result.private:.4f} private, {result.non_private:.4f} non-private"
        )


def register(app: typer.Typer) -> None:
    """Add the `train` command group to the `ldp` app."""
    group = typer.Typer(help="Train models by LDP mini-batch SGD.")
    group.callback(invoke_without_command=True)(train)
    train_kafka.register(group)
    app.add_typer(group, name="train")
