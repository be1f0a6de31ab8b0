"""The `ldp` command line: one typer app, each command (group) in a module named after it."""

from __future__ import annotations

import typer

from ldpstream.cli import (
    aggregate,
    demo,
    edge,
    estimate,
    heavy_hitters,
    mechanisms,
    serve,
    services,
    simulate,
    spec,
    tokens,
    train,
    workload,
)

app = typer.Typer(no_args_is_help=True, add_completion=False, help="ldpstream: private telemetry over Kafka.")
for command in (services, demo, train, spec, simulate, aggregate, edge, estimate, mechanisms, serve, tokens,
                workload, heavy_hitters):
    command.register(app)


def main() -> None:
    """Entry point of the `ldp` console script."""
    app()
