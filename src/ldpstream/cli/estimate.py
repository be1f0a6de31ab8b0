"""`ldp estimate NAME`: a collection's live estimates with their standard errors."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from ldpstream.cli.errors import NotPublished, require_services
from ldpstream.cli.output import estimates_table, poisoning_table, shuffle_table

console = Console(width=None if Console().is_terminal else 120)


def estimate(name: str = typer.Argument(..., help="collection name"),
             window: str = typer.Option("all", help="all | 1h (newest) | 1h:<start_ms>"),
             version: int = typer.Option(None, help="spec version (default: the newest published)"),
             postprocess: str = typer.Option("none", help="none | clip | norm_sub | project"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Live estimates of a collection with their standard errors.

    Below them, the window's suspected poisoning: the reports its detectors set aside (from the window's audit, or
    the tests on its sums) and the suspects' defended estimates beside the live ones
    (docs/explanation/fake-devices.md)."""
    from ldpstream.aggregator.estimates import POSTPROCESS, collection_estimates
    from ldpstream.aggregator.plans import PlanRegistry
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.spec import SpecError
    from ldpstream.runtime.settings import Settings

    require_services()
    cfg = Settings.from_env()
    plans = PlanRegistry(cfg.bootstrap)
    plan = plans.latest(name) if version is None else plans.get(name, version)
    if plan is None:
        raise NotPublished(name, version)
    if postprocess not in POSTPROCESS:
        console.print(f"[red]error:[/] --postprocess must be one of {', '.join(POSTPROCESS)}")
        raise typer.Exit(2)
    try:
        result = collection_estimates(RedisStore(cfg.redis), plan, window, postprocess)  # type: ignore[arg-type]
    except (SpecError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps(result))
        return
    console.print(estimates_table(result))
    console.print(poisoning_table(result))
    if "shuffle" in result:
        console.print(shuffle_table(result["shuffle"]))


def register(app: typer.Typer) -> None:
    """Add `ldp estimate`."""
    app.command()(estimate)
