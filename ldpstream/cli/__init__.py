"""The `ldp` command line: one typer app, each area's commands in a module of its own."""

from __future__ import annotations

import typer

from ldpstream.cli import demo, mechanisms, pipeline, pipeline_producer, serve, services, train
from ldpstream.cli import workload as workload_cli

app = typer.Typer(no_args_is_help=True, add_completion=False, help="ldpstream: private telemetry over Kafka.")
services.register(app)
demo.register(app)
train.register(app)
pipeline_producer.register(app)
pipeline.register(app)
mechanisms.register(app)
serve.register(app)
workload_cli.register(app)


def main() -> None:
    """Entry point of the `ldp` console script."""
    app()
