"""`ldp serve`: the HTTP API (collections, estimates, Prometheus metrics, health) in the foreground."""

from __future__ import annotations

import typer

from aggregator.api import serve as serve_api
from runtime.access import act_as
from runtime.settings import Settings


def serve(host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
          port: int = typer.Option(8000, min=1, max=65535, help="TCP port")) -> None:
    """Serve /collections, /collections/NAME/estimates, /metrics and /healthz until SIGINT or SIGTERM."""
    act_as("api")
    try:
        serve_api(Settings.from_env(), host, port, on_start=typer.echo)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}", err=True)
        raise typer.Exit(1) from exc


def register(app: typer.Typer) -> None:
    """Add `ldp serve` to the app."""
    app.command("serve")(serve)
