"""`ldp train publish JOB.yaml`, `ldp train run JOB` and the device jobs' `ldp train status JOB`: training jobs that
devices join through the edge (docs/reference/protocol.md section 13; `ldpstream.sgd.jobrun`)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from ldpstream.cli.errors import CliError, client_logs, require_services
from ldpstream.cli.output import fail
from ldpstream.cli.output import wide as console


def _evaluation_key(job_id: str) -> str:
    from ldpstream.runtime.jobs import model_prefix

    return model_prefix(job_id) + "evaluation"


def publish(job_file: Annotated[Path, typer.Argument(metavar="JOB.yaml", help="the job file (job: and evaluation:)")],
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Sign and publish a training job devices join (its job.job_id names it); publishing it again is a no-op."""
    from ldpstream.contract.spec import SpecError
    from ldpstream.contract.training import central_fields, job_central
    from ldpstream.runtime.jobs import publish_job
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import SigningError
    from ldpstream.sgd.jobfile import load_job_yaml

    try:
        spec, evaluation = load_job_yaml(job_file)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    cfg = Settings.from_env()
    require_services()
    try:
        key, created = publish_job(spec, cfg.bootstrap)
    except (SpecError, SigningError) as exc:
        fail(str(exc))
    client = redis_client(cfg.redis, 10.0)
    if evaluation is not None:
        client.set(_evaluation_key(spec.job_id), json.dumps(evaluation))
    else:
        client.delete(_evaluation_key(spec.job_id))
    out = {"job": spec.job_id, "key": key, "created": created, "epsilon": spec.epsilon,
           "mechanism": spec.mechanism.name, "parameters": spec.parameters, "batch_size": spec.batch_size,
           "max_rounds": spec.max_rounds, "lifetime_epsilon_bound": spec.epsilon * spec.max_rounds}
    out |= central_fields(spec)  # a shuffled job's central (epsilon, delta) per version; None otherwise
    central = job_central(spec)
    if as_json:
        typer.echo(json.dumps(out))
        return
    console.print(f"{key} {'published' if created else 'already published (unchanged)'}: {spec.model.architecture} "
                  f"{spec.model.dims} ({spec.parameters:,} parameters), {spec.mechanism.name} at eps "
                  f"{spec.epsilon:g} per update, at most {spec.max_rounds} round(s) per device, B = {spec.batch_size}")
    if central is not None:
        console.print(f"shuffled: each version's B updates are ({central[0]:.4g}, {central[1]:g})-DP centrally "
                      f"({central[2]}); run `ldp shuffle` beside the coordinator")


def run(job: Annotated[str, typer.Argument(help="the training job's id")],
        metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus metrics on this port")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print the final status as JSON")] = False) -> None:
    """Run a published job's coordinator until the job ends or SIGTERM/SIGINT: it takes B updates the edge
    admitted per version, steps, signs and publishes the next version."""
    from ldpstream.runtime import metrics
    from ldpstream.runtime.access import act_as
    from ldpstream.runtime.catalog import service
    from ldpstream.runtime.jobs import newest, read_jobs
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import load_signing_key
    from ldpstream.sgd.jobfile import held_out
    from ldpstream.sgd.jobrun import JobCoordinator, status

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    client_logs(verbose=True)
    act_as("coordinator")
    cfg = Settings.from_env()
    require_services()
    found = newest(read_jobs(cfg.bootstrap), job)
    if found is None:
        fail(f"no published training job {job!r} (`ldp train publish JOB.yaml`)")
    if metrics_port is not None:
        try:
            metrics.serve(metrics_port, cfg, service("coordinator"))
        except OSError as exc:
            raise CliError(f"cannot serve metrics on {cfg.metrics_addr}:{metrics_port}: {exc.strerror}") from exc
    client = redis_client(cfg.redis, 10.0)
    raw = client.get(_evaluation_key(job))
    evaluator = held_out(found.spec, json.loads(raw)) if raw else None
    coordinator = JobCoordinator(found.spec, cfg.bootstrap, client, load_signing_key(cfg.pointer_signing_key),
                                 evaluator)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def on_version(state: Any) -> None:
        last = state.evaluations[-1] if state.evaluations else {}
        if not as_json:
            console.print(f"{job}: version {state.version}" + (f", held-out accuracy {last['accuracy']:.4f}"
                                                               if last else "") + (" (done)" if state.done else ""))

    coordinator.run(should_stop=stop.is_set, on_version=on_version)
    summary = status(found.spec, client.hgetall(f"ldp:sgd:jobs:{job}:state"))
    typer.echo(json.dumps(summary) if as_json else f"{job}: version {summary['version']}, "
               f"{summary['updates_accepted']:,} updates accepted, refused {summary['refused'] or 'none'}")


def device_job_status(job: str) -> dict[str, Any] | None:
    """`ldp train status JOB`'s JSON for a job devices join (`ldpstream.sgd.jobstatus.job_status`, what the read
    API's `GET /jobs/{job}` serves), or None if no coordinator of such a job ran."""
    from ldpstream.runtime.jobs import read_jobs
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.sgd.jobstatus import job_status

    cfg = Settings.from_env()
    return job_status(redis_client(cfg.redis, 10.0), lambda: read_jobs(cfg.bootstrap), job)


def register(group: typer.Typer) -> None:
    """Add `publish` and `run` to the `ldp train` group."""
    group.command("publish")(publish)
    group.command("run")(run)


def simulate_training(url: str, token: Path, job: str, dataset: str, devices: int, split: str, policy: Path | None,
                      trust: Path | None, seed: int, concurrency: int, state_dir: Path | None, timeout_s: float,
                      as_json: bool, tls: Any = None) -> None:
    """`ldp simulate --join URL --token F --train JOB --dataset fashion-mnist --devices N [--split iid|non-iid]`:
    Python devices that each hold their own rows train the job through the edge (`ldpstream.sgd.fleet`)."""
    import tempfile

    from ldpstream.contract.signatures import TrustedKeys
    from ldpstream.device.policy import PrivacyPolicy
    from ldpstream.runtime.join_keys import pinned_keys
    from ldpstream.runtime.settings import Settings
    from ldpstream.sgd.fleet import train_fleet
    from ldpstream.sgd.images import fashion_mnist

    if dataset != "fashion-mnist":
        fail(f"--dataset: only fashion-mnist, not {dataset!r}", code=2)
    if split not in ("iid", "non-iid"):
        fail(f"--split is iid or non-iid, not {split!r}", code=2)
    keys = TrustedKeys.from_json(json.loads(trust.read_text()) if trust else pinned_keys(Settings.from_env()))
    rules = PrivacyPolicy.load(policy) if policy else PrivacyPolicy()
    data = fashion_mnist("train")
    with tempfile.TemporaryDirectory(prefix="ldp-train-fleet-") as scratch:
        where = state_dir or Path(scratch)

        def on_round(run: Any) -> None:
            if not as_json:
                console.print(f"{job}: version {run.last_version}, {run.taken:,} updates taken of {run.updates:,} "
                              f"made by {run.joined:,} devices")

        run = train_fleet(url, job, token.read_text().strip(), keys, data, devices, split, where, policy=rules,
                          seed=seed, concurrency=concurrency, timeout_s=timeout_s, tls=tls, on_round=on_round)
    out = {"job": job, "join": url, "split": split, **run.to_json()}
    if as_json:
        typer.echo(json.dumps(out))
    else:
        console.print(f"{run.joined:,} of {devices:,} devices joined {job}; {run.updates:,} updates made, "
                      f"{run.taken:,} taken; refused: {dict(run.refused) or 'none'}; outcomes {dict(run.outcomes)}")
    if run.joined and not run.taken:
        raise typer.Exit(1)


def train_demo(devices: int, seed: int, as_json: bool, port: int) -> dict[str, Any]:
    """`ldp demo --train`: publish a Fashion-MNIST softmax job (eps 8 per update, B = devices / 5, 5 versions),
    start an edge (on `port`) and the job's coordinator, have `devices` Python devices (ten images of two classes
    each) join through the edge and train it, the held-out accuracy printed version by version; then one device
    asked to join a
    copy of the job at eps 16 per update (signed by the real key: a compromised server) refuses it under the default
    policy. The summary; CliError if a device could not train, the accuracy did not rise, or the greedy job was
    accepted."""
    import tempfile
    import time

    from ldpstream.contract.clock import now_ms
    from ldpstream.contract.enrolment import mint, new_token
    from ldpstream.device.sdk import SpecRefused
    from ldpstream.device.training import TrainingDevice
    from ldpstream.edge.processes import start_edge, stop_edge, wait_live
    from ldpstream.runtime.jobs import publish_job
    from ldpstream.runtime.join_keys import load_token_key, pinned_keys
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.signing import load_signing_key
    from ldpstream.sgd.fleet import train_fleet
    from ldpstream.sgd.images import fashion_mnist
    from ldpstream.sgd.jobfile import complete_job, held_out
    from ldpstream.sgd.jobrun import JobCoordinator

    cfg = Settings.from_env()
    require_services()
    job_id = f"demo-train-{time.strftime('%Y%m%d-%H%M%S')}"
    batch = max(10, devices // 5)
    fields = {"job_id": job_id, "version": 1, "model": {"architecture": "softmax", "dims": [784, 10]},
              "mechanism": {"name": "privunitg"}, "clip": 1.0, "epsilon": 8.0, "max_rounds": 1, "batch_size": batch,
              "max_versions": 5, "expected_population": devices, "lr": 1.0, "momentum": 0.5, "max_examples": 10,
              "version_validity_s": 3600}
    spec = complete_job(fields)
    greedy = complete_job({**fields, "job_id": job_id + "-greedy", "epsilon": 16.0, "max_rounds": 1})
    for job in (spec, greedy):
        publish_job(job, cfg.bootstrap)
    client = redis_client(cfg.redis, 10.0)
    coordinator = JobCoordinator(spec, cfg.bootstrap, client, load_signing_key(cfg.pointer_signing_key),
                                 held_out(spec, {"dataset": "fashion-mnist", "rows": 10_000}))
    stop = threading.Event()
    thread = threading.Thread(target=coordinator.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    token = mint(load_token_key(cfg), new_token([f"job/{job_id}", f"job/{greedy.job_id}"], devices + 1, now_ms(),
                                                now_ms() + 3_600_000))
    url = f"http://127.0.0.1:{port}"
    edge = start_edge(port, cfg.state_dir / "edge" / "spool" / f"demo-{port}", "--enrol-per-address",
                      str(devices + 10), log_file=cfg.state_dir / "demo-edge.log")
    curve: list[dict[str, float]] = []
    try:
        coordinator.start()
        thread.start()
        wait_live(url, edge, probe="/readyz")

        def on_round(run: Any) -> None:
            state = coordinator.state
            if state is not None and state.evaluations and state.evaluations[-1] not in curve:
                curve.append(state.evaluations[-1])
                if not as_json:
                    last = state.evaluations[-1]
                    console.print(f"version {int(last['version'])}: held-out accuracy {last['accuracy']:.3f} "
                                  f"(stderr {last['accuracy_stderr']:.3f}), {run.taken:,} updates taken")

        with tempfile.TemporaryDirectory(prefix="ldp-demo-train-") as scratch:
            run = train_fleet(url, job_id, token, pinned_keys(cfg), fashion_mnist("train"), devices, "non-iid",
                              Path(scratch), seed=seed, concurrency=4, timeout_s=600, on_round=on_round)
            try:
                TrainingDevice.join(url, greedy.job_id, token, pinned_keys(cfg), state_dir=Path(scratch) / "greedy")
            except SpecRefused as refused:
                refusal = f"{refused.code}: {refused}"
            else:
                raise CliError(f"a device accepted {greedy.job_id} at eps 16 per update: the default policy failed")
    finally:
        stop.set()
        thread.join(30)
        stop_edge(edge)
    if not curve or curve[-1]["accuracy"] <= 0.1:
        raise CliError(f"the model did not learn: {curve}; fleet {run.to_json()}")
    return {"job": job_id, "devices": devices, "batch_size": batch, "fleet": run.to_json(), "curve": curve,
            "refusal": refusal}
