"""`ldp up`, `ldp down`, `ldp status`: the local Kafka and Redis (single servers, or `--cluster`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ldpstream.cli.errors import START_STACK
from ldpstream.cli.output import console, fail, name_column, styled

if TYPE_CHECKING:
    from ldpstream.aggregator.health import Health
    from ldpstream.runtime.settings import Settings
    from ldpstream.services import Service
    from ldpstream.services.prometheus import PrometheusService




def up(cluster: bool = typer.Option(False, "--cluster", help="a 3-node Kafka cluster and a Redis Cluster of 3 "
                                                                  "primaries with a replica each, not single servers"),
       prometheus: bool = typer.Option(False, "--prometheus", help="also Prometheus on PROMETHEUS_PORT (9090), "
                                                                   "scraping every local service that runs")
       ) -> None:
    """Make the spec-signing keys if missing, start the local Kafka broker and Redis server, or with --cluster the
    local clusters (idempotent). The state dir remembers which: later commands use the same. With --prometheus,
    Debian's Prometheus too (`make prometheus` installs it), its configuration generated: it scrapes every edge,
    aggregator worker, read API, shuffler and training coordinator started on this state dir."""
    from ldpstream.runtime.join_keys import ensure_join_keys
    from ldpstream.runtime.settings import CLUSTER, Settings, recorded_topology
    from ldpstream.runtime.signing import SigningError, ensure_signing_keys
    from ldpstream.services import ServiceError, services
    from ldpstream.services.prometheus import PrometheusService

    cfg = Settings.from_env()
    try:
        if (cluster or cfg.cluster) and recorded_topology(cfg.state_dir) != CLUSTER:
            cfg = record_topology(replace(cfg, cluster=False), CLUSTER)
        signing = ensure_signing_keys(cfg.spec_signing_key, cfg.spec_trusted_keys)
        console.print(styled(("spec signing", "bold"), f": {signing}"))
        console.print(styled(("device join", "bold"), f": {ensure_join_keys(cfg)}"))
        for svc in [*services(cfg), *([PrometheusService(cfg)] if prometheus else [])]:
            with console.status(f"starting {svc.name} ..."):
                console.print(styled((svc.name, "bold"), f": {svc.start()}"))
    except (ServiceError, SigningError) as exc:
        fail(str(exc))


def down(purge: bool = typer.Option(False, "--purge", help="also delete the services' data")) -> None:
    """Stop the local services that `ldp up` started."""
    from ldpstream.runtime.settings import TOPOLOGY_FILE, Settings
    from ldpstream.services import ServiceError

    cfg = Settings.from_env()
    failed = False
    for svc in reversed(with_prometheus(cfg)):
        try:
            console.print(styled((svc.name, "bold"), f": {svc.stop()}"))
        except ServiceError as exc:
            console.print(styled((f"{svc.name}: {exc}", "red")))
            failed = True
        for path in svc.purgeable if purge else []:
            shutil.rmtree(path, ignore_errors=True)
    if purge and not failed:
        (cfg.state_dir / TOPOLOGY_FILE).unlink(missing_ok=True)
    if failed:
        raise typer.Exit(1)


def status(as_json: bool = typer.Option(False, "--json", help="print JSON"),
           services_only: bool = typer.Option(False, "--services-only", help="only the services, not the pipeline"),
           ) -> None:
    """Show each service, its address and whether it answers, the project's processes this state dir's Prometheus
    targets announce (by service of the catalog), then the pipeline's health (workers, crash loops, collections with
    messages waiting); exit 1 if a service does not answer or the pipeline is unhealthy."""
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    rows = [row for svc in with_prometheus(cfg) for row in svc.statuses()]
    running = processes(cfg)
    health = pipeline_status(cfg) if all(r.answers for r in rows) and not services_only else None
    if as_json:
        typer.echo(json.dumps({"services": [r.__dict__ for r in rows], "processes": running,
                               "pipeline": None if health is None else health.as_dict()}))
    else:
        table = Table(name_column("service"), name_column("address"), "pid", "answers", "authentication")
        for r in rows:
            auth = styled((r.authentication, "red" if r.authentication == "off" else ""))
            table.add_row(r.name, r.address, str(r.pid or "-"),
                          styled(("yes", "green") if r.answers else ("no", "red")), auth)
        console.print(table)
        for r in rows:  # below the table, which then fits 80 columns
            if r.detail:
                console.print(styled((r.name, "bold"), f": {r.detail}"))
        if not all(r.answers for r in rows):
            console.print(styled(("not every service answers", "red"), f": {START_STACK}"))
        console.print(styled(("processes", "bold"), ": " + ("; ".join(
            f"{name} at {', '.join(addresses)}" for name, addresses in running.items() if addresses)
            or "none announced on this state dir")))
        if health is not None:
            print_health(health)
    if not all(r.answers for r in rows) or (health is not None and not health.ok):
        raise typer.Exit(1)


def processes(cfg: Settings) -> dict[str, list[str]]:
    """The metrics addresses of each service of the catalog that serves metrics, as its processes announced them on
    this state dir (`ldpstream.runtime.targets`; none for one that runs elsewhere or not at all)."""
    from ldpstream.runtime.catalog import SERVICES
    from ldpstream.runtime.targets import announced

    jobs = announced(cfg)
    return {svc.name: jobs.get(svc.metrics.job, []) for svc in SERVICES if svc.metrics is not None}


def with_prometheus(cfg: Settings) -> list[Service | PrometheusService]:
    """The local services, and Prometheus when it runs (`ldp up --prometheus`) or PROMETHEUS_URL names one."""
    from ldpstream.services import services
    from ldpstream.services.prometheus import PrometheusService

    prometheus = PrometheusService(cfg)
    return [*services(cfg), *([prometheus] if prometheus.running else [])]


def record_topology(cfg: Settings, topology: str) -> Settings:
    """Record in the state dir that it holds `topology`'s services (refused while the servers of `cfg`'s run); the
    settings as they now are."""
    from ldpstream.runtime.settings import TOPOLOGY_FILE, Settings
    from ldpstream.services import ServiceError, services

    running = [svc.name for svc in services(cfg) if any(r.pid for r in svc.statuses())]
    if running:
        raise ServiceError(f"the single-node {' and '.join(running)} of {cfg.state_dir} are running: `ldp down` them "
                           f"first, or use another LDP_STATE_DIR for the cluster")
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / TOPOLOGY_FILE).write_text(topology + "\n")
    return Settings.from_env()


def pipeline_status(cfg: Settings) -> Health:
    """The pipeline's health over the project's services (`ldpstream.aggregator.health`)."""
    from ldpstream.aggregator.health import HealthPolicy, pipeline_health
    from ldpstream.aggregator.plans import PlanRegistry
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.shuffled import shuffled_names
    from ldpstream.readapi.api import TopicEnds

    plans = PlanRegistry(cfg.bootstrap).plans()
    return pipeline_health(RedisStore(cfg.redis), {p.spec.name: p.spec.topic for p in plans}, TopicEnds(cfg.bootstrap),
                           HealthPolicy.from_env(), shuffled=shuffled_names(p.spec for p in plans))


def print_health(health: Health) -> None:
    alive = sum(w["alive"] for w in health.workers)
    waiting = sum(c["waiting"] for c in health.collections)
    verdict = ("healthy", "green") if health.ok else ("unhealthy", "red")
    console.print(styled("pipeline: ", verdict, f"; {alive} of {len(health.workers)} worker(s) alive; {waiting:,} "
                         f"message(s) waiting in {len(health.collections)} collection(s)"))
    for reason in health.reasons:
        console.print(styled("  ", ("-", "red"), f" {reason}"))


def rotate_credentials(principal: str = typer.Argument(..., help="admin, gateway or a service's principal "
                                                                  "(src/ldpstream/runtime/catalog.py)")
                       ) -> None:
    """Give a principal new Kafka and Redis passwords on the running local services; restart its processes."""
    from confluent_kafka import KafkaException
    from redis import RedisError

    from ldpstream.runtime.settings import Settings
    from ldpstream.services.rotation import rotate

    cfg = Settings.from_env()
    try:
        rotate(cfg, principal)
    except (ValueError, OSError, KafkaException, RedisError) as exc:
        fail(str(exc))
    console.print(f"{principal}: new passwords set on Kafka and Redis and written under {cfg.secrets_dir}")


def generate_credentials(directory: Path = typer.Option(Path("deploy/secrets"), "--dir",
                                                        help="where compose finds them")) -> None:
    """Make the docker compose deployment's secrets once (kept if they exist): every principal's passwords, the
    Redis ACL file, the broker's configuration, the spec-signing keys, the edge's master key, Grafana's password."""
    from ldpstream.services.compose import generate

    files = generate(directory)
    console.print(f"{len(files)} secret files under {directory.resolve()} (0700; never commit it)")


def apply_credentials() -> None:
    """As the admin: create the principals' Kafka users, make the ACLs the model's and create the shared topics on
    the cluster at KAFKA_BOOTSTRAP (the compose `setup` service runs it)."""
    from confluent_kafka import KafkaException

    from ldpstream.runtime.kafka_access import apply_access
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    try:
        apply_access(cfg)
    except (OSError, KafkaException, RuntimeError) as exc:
        fail(str(exc))
    console.print(f"users, ACLs and shared topics applied at {cfg.bootstrap}")


def register(app: typer.Typer) -> None:
    """Add the service commands to the `ldp` app."""
    app.command()(up)
    app.command()(down)
    app.command()(status)
    credentials = typer.Typer(help="The generated credentials of the local services.", no_args_is_help=True)
    credentials.command("rotate")(rotate_credentials)
    credentials.command("generate")(generate_credentials)
    credentials.command("apply")(apply_credentials)
    app.add_typer(credentials, name="credentials")
