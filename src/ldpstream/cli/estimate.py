"""`ldp estimate NAME`: a collection's live estimates with their standard errors."""

from __future__ import annotations

import json

import typer

from ldpstream.cli.errors import published_plan, require_services
from ldpstream.cli.output import estimates_table, fail, poisoning_table, shuffle_table
from ldpstream.cli.output import wide as console


def estimate(name: str = typer.Argument(..., help="collection name"),
             window: str = typer.Option("all", help="all | 1h (newest) | 1h:<start_ms>"),
             version: int = typer.Option(None, help="spec version (default: the newest published)"),
             postprocess: str = typer.Option("none", help="none | clip | norm_sub | project"),
             quantiles: str = typer.Option(None, "--quantiles",
                                           help="comma-separated quantile levels in (0, 1) of the distributions "
                                                "(sw, hh attributes; default 0.01,0.05,0.25,0.5,0.75,0.95,0.99)"),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """Live estimates of a collection with their standard errors.

    Below them, the window's suspected poisoning: the reports its detectors set aside (from the window's audit, or
    the tests on its sums) and the suspects' defended estimates beside the live ones
    (docs/explanation/fake-devices.md). A numeric attribute reported by a distribution mechanism shows its quantiles,
    at the levels of --quantiles."""
    from ldpstream.aggregator.estimates import POSTPROCESS, attribute_distribution, collection_estimates
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.spec import SpecError
    from ldpstream.mechanisms.distribution.base import check_levels
    from ldpstream.runtime.settings import Settings

    require_services()
    cfg = Settings.from_env()
    plan = published_plan(cfg.bootstrap, name, version)
    if postprocess not in POSTPROCESS:
        fail(f"--postprocess must be one of {', '.join(POSTPROCESS)}", code=2)
    try:
        levels = None if quantiles is None else tuple(check_levels([float(q) for q in quantiles.split(",")]))
    except ValueError:  # LDPError is a ValueError
        fail(f"--quantiles must be comma-separated levels in (0, 1), not {quantiles!r}", code=2)
    store = RedisStore(cfg.redis)
    try:
        result = collection_estimates(store, plan, window, postprocess)  # type: ignore[arg-type]
        for attribute, entry in result["attributes"].items():
            if levels is not None and "distribution" in entry:  # the same window, the levels asked
                entry["distribution"] = attribute_distribution(store, plan, attribute, result["window"],
                                                               levels)["distribution"]
    except (SpecError, ValueError) as exc:
        fail(str(exc), code=2)
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
