"""`ldp up`, `ldp down`, `ldp status`: the local Kafka and Redis."""

from __future__ import annotations

import json
import shutil

import typer
from rich.console import Console
from rich.table import Table

from ldpstream.services import ServiceError, services
from runtime.settings import Settings

console = Console()


def up() -> None:
    """Start the local Kafka broker and Redis server (idempotent)."""
    cfg = Settings.from_env()
    try:
        for svc in services(cfg):
            with console.status(f"starting {svc.name} ..."):
                console.print(f"[bold]{svc.name}[/]: {svc.start()}")
    except ServiceError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


def down(purge: bool = typer.Option(False, "--purge", help="also delete the services' data")) -> None:
    """Stop the local services that `ldp up` started."""
    cfg = Settings.from_env()
    failed = False
    for svc in reversed(services(cfg)):
        try:
            console.print(f"[bold]{svc.name}[/]: {svc.stop()}")
        except ServiceError as exc:
            console.print(f"[red]{svc.name}: {exc}[/]")
            failed = True
        if purge and svc.managed:
            shutil.rmtree(svc.data, ignore_errors=True)
    if failed:
        raise typer.Exit(1)


def status(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Show each service, its address and whether it answers; exit 1 if one does not."""
    rows = [svc.status() for svc in services(Settings.from_env())]
    if as_json:
        typer.echo(json.dumps([r.__dict__ for r in rows]))
    else:
        table = Table("service", "address", "managed", "pid", "answers", "detail")
        for r in rows:
            table.add_row(r.name, r.address, "yes" if r.managed else "no", str(r.pid or "-"),
                          "[green]yes[/]" if r.answers else "[red]no[/]", r.detail)
        console.print(table)
    if not all(r.answers for r in rows):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the service commands to the `ldp` app."""
    app.command()(up)
    app.command()(down)
    app.command()(status)
