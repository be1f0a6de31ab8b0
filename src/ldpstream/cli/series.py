"""`ldp series NAME`: one attribute's windows in a time range, with estimates, 95% intervals, reports and privacy, as
a terminal chart, JSON or CSV; read from the local stack, or with --url through a read API (`ldp serve`)."""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table

from ldpstream.cli.errors import published_plan, require_services
from ldpstream.cli.output import fail
from ldpstream.cli.output import wide as console

RELATIVE = re.compile(r"([0-9]{1,9})([smhd])")
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
BAR = 40  # characters of a chart's interval column


def absolute(value: str | None, now_ms: int) -> str | None:
    """A --from/--to value as the API takes it: '6h' (that long before now) as ms; ms or ISO 8601 as given."""
    if value is None:
        return None
    found = RELATIVE.fullmatch(value)
    return str(now_ms - int(found.group(1)) * UNIT_MS[found.group(2)]) if found else value


def series(name: str = typer.Argument(..., help="collection name"),
           attribute: str = typer.Option(None, "--attribute", "-a",
                                         help="the attribute (may be left out when the spec has one)"),
           window: str = typer.Option(None, help="a window length of the spec, e.g. 1h (default: its shortest)"),
           from_: str = typer.Option(None, "--from", help="start: ms since the epoch, ISO 8601 (UTC unless a zone "
                                                          "is given) or a time ago like 6h, 7d (default: 48 windows "
                                                          "before --to)"),
           to: str = typer.Option(None, help="end, exclusive, as --from (default: now)"),
           version: int = typer.Option(None, help="spec version (default: the newest published)"),
           url: str = typer.Option(None, envvar="LDP_API_URL",
                                   help="read through this read API (`ldp serve`) instead of the local stack"),
           token: str = typer.Option(None, envvar="LDP_API_TOKEN", help="bearer token (scope read) for --url"),
           as_json: bool = typer.Option(False, "--json", help="the API's JSON document"),
           as_csv: bool = typer.Option(False, "--csv", help="one row per window and estimate")) -> None:
    """One attribute's windows in a time range: estimates, standard errors, 95% intervals, reports and privacy per
    window, as a terminal chart (or --json, --csv)."""
    from ldpstream.contract.clock import now_ms

    if as_json and as_csv:
        fail("--json or --csv, not both", code=2)
    now = now_ms()
    start, end = absolute(from_, now), absolute(to, now)
    document = (remote(url, token, name, attribute, window, start, end, version) if url is not None else
                local(name, attribute, window, start, end, version, now))
    if as_json:
        typer.echo(json.dumps(document))
    elif as_csv:
        write_csv(document)
    else:
        for table in charts(document):
            console.print(table)


def local(name: str, attribute: str | None, window: str | None, start: str | None, end: str | None,
          version: int | None, now: int) -> dict[str, Any]:
    """The series read from the local stack's Redis (specs from its Kafka)."""
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.readapi.series import SeriesError, collection_series, series_query
    from ldpstream.runtime.settings import Settings

    require_services()
    cfg = Settings.from_env()
    plan = published_plan(cfg.bootstrap, name, version)
    try:
        query = series_query(plan, attribute, window, start, end, now)
    except SeriesError as exc:
        fail(str(exc), code=2)
    return collection_series(RedisStore(cfg.redis), plan, query)


def remote(url: str, token: str | None, name: str, attribute: str | None, window: str | None, start: str | None,
           end: str | None, version: int | None) -> dict[str, Any]:
    """The series read through the read API at `url`."""
    from ldpstream.client import Client, ClientError

    if not token:
        fail("--url needs --token (or LDP_API_TOKEN): `ldp tokens create --scope read`", code=2)
    try:
        return Client(url, token).series_document(name, attribute, window, start, end, version)
    except (ClientError, ValueError) as exc:
        fail(str(exc), code=2 if getattr(exc, "status", 400) is not None else 1)


def write_csv(document: dict[str, Any]) -> None:
    """The series' rows (`ldpstream.client.series_rows`) as CSV on stdout, times in ISO 8601 UTC."""
    from ldpstream.client import COLUMNS, series_rows

    out = csv.DictWriter(sys.stdout, fieldnames=["collection", "attribute", *COLUMNS], lineterminator="\n")
    out.writeheader()
    for row in series_rows(document):
        out.writerow({"collection": document["collection"], "attribute": document["attribute"], **row,
                      "start": iso(row["start"]), "end": iso(row["end"])})


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def interval_bar(low: float | None, estimate: float | None, high: float | None, lo: float, hi: float) -> str:
    """The interval [low, high] as a bar on the scale [lo, hi], the estimate as a dot."""
    if None in (low, estimate, high):
        return ""
    span = hi - lo or 1.0

    def at(x: float) -> int:
        return min(BAR - 1, max(0, round((x - lo) / span * (BAR - 1))))

    cells = ["·"] * BAR
    for i in range(at(low), at(high) + 1):  # type: ignore[arg-type]
        cells[i] = "─"
    cells[at(low)], cells[at(high)] = "├", "┤"  # type: ignore[arg-type]
    cells[at(estimate)] = "●"  # type: ignore[arg-type]
    return "".join(cells)


def charts(document: dict[str, Any]) -> list[Table]:
    """One table per estimate of the attribute (its mean, or each value, key or query): a row per window with the
    estimate, the half-width of its 95% interval, the reports, the privacy figures and the interval drawn to scale."""
    lines: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for window in document["windows"]:
        for group, points in window["estimates"].items():
            for label, point in ({"mean": points} if group == "mean" else points).items():
                lines.setdefault((group, label), []).append((window, point))
    unit = f" ({document['unit']})" if document["unit"] else ""
    shuffled = document["privacy"]["shuffled"] is not None
    if not lines:
        table = Table(title=f"{document['collection']} v{document['version']} {document['attribute']}: no "
                            f"{document['window']} window with reports in [{iso(document['from_ms'])}, "
                            f"{iso(document['to_ms'])})")
        return [table]
    tables = []
    for (group, label), rows in lines.items():
        bounds = [x for _, p in rows for x in (p["low"], p["high"]) if x is not None]
        lo, hi = (min(bounds), max(bounds)) if bounds else (0.0, 1.0)
        what = "mean" if group == "mean" else f"{group} {label!r}"
        table = Table("window start (UTC)", "reports", "estimate", "± 95%", "eps",
                      *(["central eps"] if shuffled else []), f"{_fmt(lo)} … {_fmt(hi)}",
                      title=f"{document['collection']} v{document['version']} {document['attribute']}{unit}: {what} "
                            f"per {document['window']} window, 95% intervals")
        for window, p in rows:
            central = window["privacy"]["central"]
            half = None if p["stderr"] is None else p["high"] - p["estimate"]
            table.add_row(iso(window["start_ms"]), f"{window['sampled']:,} of {window['reports']:,}",
                          _fmt(p["estimate"]), _fmt(half), f"{window['privacy']['epsilon']:g}",
                          *([_fmt(central["epsilon"]) if central else "-"] if shuffled else []),
                          interval_bar(p["low"], p["estimate"], p["high"], lo, hi))
        tables.append(table)
    return tables


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def register(app: typer.Typer) -> None:
    """Add `ldp series`."""
    app.command()(series)
