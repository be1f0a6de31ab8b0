"""`ldp aggregate`: aggregator worker processes in one consumer group, supervised, in the foreground."""

from __future__ import annotations

import logging

import typer

from ldpstream.cli.errors import CliError, client_logs, require_services


def aggregate(workers: int = typer.Option(1, min=1, max=64, help="worker processes (one consumer group)"),
              group: str = typer.Option("ldp-aggregator", help="consumer group (ldp-aggregator*: ACLs)"),
              metrics_port: int = typer.Option(None, help="serve worker i's metrics on this port + i"),
              audit: bool = typer.Option(True, help="also run the poisoning auditor, which audits each window as it "
                                                    "closes (several `ldp aggregate` share the windows)")) -> None:
    """Run aggregator workers in the foreground until SIGINT/SIGTERM (each batch applied whole or not at all), and
    the poisoning auditor beside them."""
    from ldpstream.aggregator.health import WorkerRegistry
    from ldpstream.aggregator.processes import WorkerPool
    from ldpstream.runtime.process import port_in_use
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    taken = [metrics_port + i for i in range(workers) if metrics_port is not None and port_in_use(metrics_port + i)]
    if taken:
        raise CliError(f"cannot serve metrics on {cfg.metrics_addr}:{taken[0]}: the port is in use by another "
                       f"process (worker i serves on --metrics-port + i)")
    require_services()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    client_logs(verbose=True)  # a service in the foreground: its clients' warnings are its log
    registry = WorkerRegistry(redis_client(cfg.redis, 5.0))
    raise typer.Exit(WorkerPool(workers, group, metrics_port, registry, audit).run())


def register(app: typer.Typer) -> None:
    """Add `ldp aggregate`."""
    app.command()(aggregate)
