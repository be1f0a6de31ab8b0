"""`ldp aggregate` and `ldp estimate`: the aggregator workers and the estimates they keep."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from aggregator.estimates import POSTPROCESS, collection_estimates
from aggregator.plans import PlanRegistry
from aggregator.processes import WorkerPool
from aggregator.store import RedisStore
from ldpstream.services import ServicesConfig
from producer.spec import SpecError

console = Console(width=None if Console().is_terminal else 120)


def aggregate(workers: int = typer.Option(1, min=1, max=64, help="worker processes (one consumer group)"),
              group: str = typer.Option("ldp-aggregator", help="Kafka consumer group"),
              metrics_port: int = typer.Option(None, help="serve worker i's metrics on this port + i")) -> None:
    """Run aggregator workers in the foreground until SIGINT/SIGTERM (each batch applied whole or not at all)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    raise typer.Exit(WorkerPool(workers, group, metrics_port).run())


def estimate(name: str = typer.Argument(..., help="collection name"),
             window: str = typer.Option("all", help="all | 1h (newest) | 1h:<start_ms>"),
             version: int = typer.Option(None, help="spec version (default: the newest published)"),
             postprocess: str = typer.Option("none", help="none | clip | norm_sub | project"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Live estimates of a collection with their standard errors."""
    cfg = ServicesConfig.from_env()
    plans = PlanRegistry(cfg.bootstrap)
    plan = plans.latest(name) if version is None else plans.get(name, version)
    if plan is None:
        console.print(f"[red]error:[/] no published collection {name!r}" + (f" version {version}" if version else ""))
        raise typer.Exit(1)
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


def estimates_table(result: dict[str, Any], truth: dict[str, Any] | None = None) -> Table:
    """A table of a collection's estimates (and, given the truth, |error| / stderr)."""
    title = f"{result['collection']} v{result['version']} window {result['window']}: {result['reports']:,} reports"
    columns = ["attribute", "value", "estimate", "stderr", *(["truth", "|err|/stderr"] if truth else ["95% CI"])]
    table = Table(*columns, title=title)
    for name, entry in result["attributes"].items():
        kind = "frequencies" if "frequencies" in entry else "answers"
        rows = ([("mean", entry["mean"], entry["stderr"], (truth or {}).get(name, {}).get("mean"))]
                if "mean" in entry else
                [(v, e["estimate"], e["stderr"], (truth or {}).get(name, {}).get(kind, {}).get(v))
                 for v, e in entry[kind].items()])
        for i, (label, est, se, true) in enumerate(rows):
            cells = [name if i == 0 else "", str(label), _fmt(est), _fmt(se)]
            if truth is not None:
                z = abs(est - true) / se if None not in (est, se, true) and se > 0 else float("nan")
                cells += [_fmt(true), f"[{'green' if z < 3 else 'red'}]{z:.2f}[/]"]
            else:
                cells.append("-" if None in (est, se) else f"[{_fmt(est - 1.96 * se)}, {_fmt(est + 1.96 * se)}]")
            table.add_row(*cells)
    return table


def _fmt(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.4g}"


def register(app: typer.Typer) -> None:
    """Add `ldp aggregate` and `ldp estimate`."""
    app.command()(aggregate)
    app.command()(estimate)
