"""`ldp train`: LDP mini-batch SGD. `ldp train --offline ...` runs the in-process driver over simulated devices;
`ldp train --job FILE [--devices N]` runs a training job's coordinator over Kafka (with N simulated devices in this
process), `ldp train status JOB` shows a job's progress and `ldp train devices --job FILE` runs a job's simulated
fleet alone, for a coordinator running elsewhere (`ldpstream.sgd.jobs`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ldpstream.cli.errors import CliError, client_logs, require_services
from ldpstream.cli.output import fail
from ldpstream.cli.output import wide as console
from ldpstream.sgd import GRADIENT_MECHANISMS

if TYPE_CHECKING:
    from ldpstream.sgd.checkpoint import JobState
    from ldpstream.sgd.datasets import Dataset
    from ldpstream.sgd.images import LabelledSet




def _data(model: str, use_synthetic: bool, census: bool, devices: int, dims: int, seed: int) -> tuple[Dataset, Dataset]:
    from ldpstream.sgd.datasets import adult, synthetic
    from ldpstream.sgd.jobs import held_out_rows

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
    model: Annotated[str, typer.Option(help="linear, logistic or svm; with --dataset: softmax or mlp")] = "logistic",
    use_synthetic: Annotated[bool, typer.Option("--synthetic", help="a synthetic set with a known model")] = False,
    census: Annotated[bool, typer.Option("--census", help="the UCI Adult census data (extra 'data')")] = False,
    devices: Annotated[int, typer.Option(help="devices (synthetic; with --job: a fleet of them)")] = 100_000,
    dims: Annotated[int, typer.Option(help="number of features d (synthetic)")] = 10,
    epsilon: Annotated[float, typer.Option(help="privacy budget per device")] = 1.0,
    mechanism: Annotated[str | None, typer.Option(help=f"gradient mechanism: {', '.join(GRADIENT_MECHANISMS)} "
                                                       "(default hm); with --dataset: privunitg, privunit2, "
                                                       "projunit, duchi-l2, pm, hm, duchi, gaussian (delta 1e-5) or "
                                                       "none (default: L2's optimal at the model's size)")] = None,
    batch_size: Annotated[int | None, typer.Option(help="mini-batch size g (default: 001's rule)")] = None,
    reduced_dims: Annotated[int | None, typer.Option(help="dimension reduction to r (MGD-DR)")] = None,
    gamma0: Annotated[float, typer.Option(help="learning rate gamma_t = gamma0 / sqrt(t)")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the data, the device order and the noise")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    job_file: Annotated[Path | None, typer.Option("--job", help="run a job file's coordinator over Kafka")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="with --job: serve Prometheus metrics here")] = None,
    dataset: Annotated[str | None, typer.Option(help="train a network (--model softmax|mlp) on fashion-mnist, "
                                                     "synthetic (10 Gaussian classes) or adult")] = None,
    clients_per_round: Annotated[int, typer.Option(min=1, help="with --dataset: devices per round B")] = 600,
    epochs: Annotated[int, typer.Option(min=1, help="with --dataset: epochs T (each device once per epoch)")] = 1,
    split: Annotated[str, typer.Option(help="with --dataset: iid (one example per device) or non-iid (10 "
                                            "examples of 2 classes per device)")] = "iid",
    lr: Annotated[float, typer.Option(help="with --dataset: the server's learning rate")] = 1.0,
    momentum: Annotated[float, typer.Option(help="with --dataset: the server's momentum")] = 0.5,
    hidden: Annotated[str, typer.Option(help="with --model mlp: hidden widths, comma-separated")] = "64",
    save: Annotated[Path | None, typer.Option(help="with --dataset: write the final model's snapshot bytes here")]
    = None,
) -> None:
    """Train a model by LDP mini-batch SGD and compare it with non-private SGD on the same held-out rows."""
    from pydantic import ValidationError

    from ldpstream.sgd.offline import compare_offline
    from ldpstream.sgd.training import TrainingJob

    if ctx.invoked_subcommand is not None:
        return
    if job_file is not None:
        return train_job(ctx, job_file, metrics_port)
    if not offline:
        raise typer.BadParameter("pass --offline (in process) or --job FILE (over Kafka)")
    if dataset is not None:
        return train_network(dataset, model, mechanism, epsilon, clients_per_round, epochs, split, lr, momentum,
                             hidden, devices, dims, seed, as_json, save)
    mechanism = mechanism or "hm"
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


def _network_data(dataset: str, devices: int, dims: int, seed: int) -> tuple[LabelledSet, LabelledSet]:
    from ldpstream.sgd.datasets import adult
    from ldpstream.sgd.images import LabelledSet, fashion_mnist, gaussian_classes
    from ldpstream.sgd.jobs import held_out_rows

    if dataset == "fashion-mnist":
        return fashion_mnist("train"), fashion_mnist("test")
    if dataset == "synthetic":
        test_rows = held_out_rows(devices)
        full = gaussian_classes(devices + test_rows, dims, 10, seed)
        return (LabelledSet(full.name, full.x[test_rows:], full.y[test_rows:], full.classes),
                full.head(test_rows))
    if dataset == "adult":
        census = adult("logistic")
        train, test = (LabelledSet(d.name, d.x.astype("float32"), (d.y > 0).astype(int), 2)
                       for d in census.split(len(census.y) // 10, seed))
        return train, test
    raise typer.BadParameter(f"unknown dataset {dataset!r}; known: fashion-mnist, synthetic, adult")


def train_network(dataset: str, model: str, mechanism: str | None, epsilon: float, clients_per_round: int,
                  epochs: int, split: str, lr: float, momentum: float, hidden: str, devices: int, dims: int, seed: int,
                  as_json: bool, save: Path | None) -> None:
    """`ldp train --offline --dataset D --model softmax|mlp ...`: the offline trainer of `ldpstream.sgd.federated`;
    without --mechanism, the default of L2 clipping at the model's size (`default_gradient_mechanism`)."""
    from ldpstream.contract.networks import make_network
    from ldpstream.mechanisms.gradients import default_gradient_mechanism
    from ldpstream.sgd.federated import FederatedJob, train_federated
    from ldpstream.sgd.images import device_split

    try:
        widths = tuple(int(w) for w in hidden.split(",") if w.strip()) if model == "mlp" else ()
        train_set, test_set = _network_data(dataset, devices, dims, seed)
        net = make_network(model, (train_set.dims, *widths, train_set.classes))
        mechanism = mechanism or default_gradient_mechanism("l2", net.size)
        job = FederatedJob(mechanism, epsilon, clients_per_round, epochs, lr, momentum, seed)
        run = train_federated(job, net, train_set, device_split(split, train_set.y, seed), test_set)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    result = run.summary
    if save is not None:
        save.write_bytes(run.snapshot.encode())
    if as_json:
        typer.echo(json.dumps(result))
        return
    lifetime = "non-private" if result["lifetime_epsilon"] is None else (
        f"eps {epsilon:g} per report, lifetime eps {result['lifetime_epsilon']:g} over "
        f"{result['participations_per_device']} participation(s)")
    typer.echo(f"{model} {tuple(result['dims'])} on {dataset} ({result['split']}, {result['devices']:,} devices), "
               f"{mechanism}, {result['rounds']} rounds of {clients_per_round}: held-out accuracy "
               f"{result['accuracy']:.4f} (stderr {result['accuracy_stderr']:.4f}), loss {result['loss']:.4f}; "
               f"{lifetime}")


def train_job(ctx: typer.Context, job_file: Path, metrics_port: int | None) -> None:
    """`ldp train --job FILE [--devices N] [--seed S] [--json]`: run the job's coordinator in the foreground."""
    from ldpstream.runtime import metrics
    from ldpstream.runtime.access import act_as
    from ldpstream.runtime.settings import Settings
    from ldpstream.sgd.checkpoint import RedisCheckpoint
    from ldpstream.sgd.coordinator import Coordinator
    from ldpstream.sgd.devices import Simulation
    from ldpstream.sgd.jobs import held_out_evaluator, load_job_file, run_with_fleet, state_summary

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    client_logs(verbose=True)  # a service in the foreground: its clients' warnings are its log
    act_as("coordinator")  # its simulated devices (if any) send and read as the gateway
    try:
        spec = load_job_file(job_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    cfg = Settings.from_env()
    if metrics_port is not None:
        try:
            metrics.serve(metrics_port, cfg, "ldp-sgd")
        except OSError as exc:
            raise CliError(f"cannot serve metrics on {cfg.metrics_addr}:{metrics_port}: {exc.strerror}") from exc
    require_services()
    checkpoint = RedisCheckpoint(cfg.redis)
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
             f"rejected {summary['rejected'] or 'none'}",
             f"privacy: eps {summary['privacy']['epsilon_per_report']:g} per report, "
             f"{summary['privacy']['participations_per_device']} participation(s) per device: lifetime eps "
             f"{summary['privacy']['lifetime_epsilon']:g}"]
    if "evaluation" in summary:
        ev = summary["evaluation"]
        lines.append(f"held-out ({ev['held_out_rows']:,} rows): " + ", ".join(
            f"{k} {v:.4f} (stderr {ev[k + '_stderr']:.4f})" for k, v in ev.items() if k + "_stderr" in ev))
    return "\n".join(lines)


def status(job: str = typer.Argument(..., help="training job id"),
           as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """A job's iteration, gradients accepted and dropped by reason, parameters and held-out evaluation."""
    from ldpstream.cli.train_jobs import device_job_status
    from ldpstream.runtime.settings import Settings
    from ldpstream.sgd.checkpoint import RedisCheckpoint
    from ldpstream.sgd.jobs import state_summary

    joined = device_job_status(job)  # a job devices join through the edge (`ldp train publish`)
    if joined is not None:
        typer.echo(json.dumps(joined) if as_json else json.dumps(joined, indent=1))
        return
    cfg = Settings.from_env()
    checkpoint = RedisCheckpoint(cfg.redis)
    state = checkpoint.load(job)
    if state is None:
        fail(f"no training job {job!r}")
    summary = state_summary(state, checkpoint)
    if as_json:
        typer.echo(json.dumps(summary))
        return
    console.print(_summary_text(summary))


def devices(job_file: Path = typer.Option(..., "--job", help="the job file (its simulation section)"),
            count: int = typer.Option(None, "--devices", min=1, help="devices (default: the simulation's)"),
            timeout_s: float = typer.Option(3600.0, help="give up after this many seconds")) -> None:
    """Run a job's simulated fleet (for a coordinator running elsewhere) until the job's final version."""
    from ldpstream.runtime.settings import Settings
    from ldpstream.sgd.devices import Fleet, Simulation
    from ldpstream.sgd.jobs import load_job_file

    try:
        spec = load_job_file(job_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    simulation = spec.simulation or Simulation()
    if count is not None:
        simulation = simulation.model_copy(update={"devices": count})
    train, _ = simulation.data(spec.job)
    cfg = Settings.from_env()
    fleet = Fleet(spec.job, train.x, train.y, cfg.bootstrap, seed=simulation.seed)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{len(train.y):,} devices of job {spec.job.job_id}", total=len(train.y))
        result = fleet.run(timeout_s=timeout_s, on_sent=lambda n: progress.advance(task, n))
    console.print(f"{result.sent:,} devices sent their gradient in {result.messages:,} messages; last version "
                  f"{result.last_version}" + (" (final)" if result.done else ""))


def register(app: typer.Typer) -> None:
    """Add the `train` command group to the `ldp` app."""
    group = typer.Typer(help="Train models by LDP mini-batch SGD.")
    group.callback(invoke_without_command=True)(train)
    group.command("status")(status)
    group.command("devices")(devices)
    from ldpstream.cli.train_jobs import register as register_jobs

    register_jobs(group)
    app.add_typer(group, name="train")
