"""`ldp privacy shuffle`: the central (epsilon, delta) of shuffled eps0-LDP reports (`ldpstream.mechanisms.shuffle`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from ldpstream.cli.output import console

privacy_app = typer.Typer(no_args_is_help=True, help="Privacy accounting: amplification by shuffling.")


@privacy_app.command("shuffle")
def shuffle(
    epsilon0: Annotated[float, typer.Option("--epsilon0", help="each report's local epsilon")],
    reports: Annotated[int, typer.Option("--reports", min=1, help="reports shuffled together (a window's batch)")],
    delta: Annotated[float, typer.Option("--delta", help="the central delta (in total, over --windows)")],
    mechanism: Annotated[str | None, typer.Option(help="the mechanism, for its own tighter bound (grr, oue, sue, "
                                                       "olh, blh, hadamard, duchi, harmony, pm, laplace)")] = None,
    domain: Annotated[int | None, typer.Option(help="the mechanism's domain size (grr: k; oue, olh: d)")] = None,
    windows: Annotated[int, typer.Option(min=1, help="windows a device reports in, composed")] = 1,
    sybil_fraction: Annotated[float, typer.Option(help="the fraction of reports assumed fake (left out of the "
                                                       "crowd)")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every bound on the central epsilon of shuffled eps0-LDP reports at delta, and the tightest valid one."""
    from ldpstream.mechanisms.shuffle import shuffle_bounds

    result = shuffle_bounds(epsilon0, reports, delta, mechanism, domain, windows, sybil_fraction)
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table("bound", "epsilon", title=f"eps0 = {epsilon0:g}, {reports:,} reports, delta = {delta:g}"
                                            + (f", {windows} windows" if windows > 1 else ""))
    for name, value in sorted(result["bounds"].items(), key=lambda kv: kv[1]):
        table.add_row(name + ("  (tightest)" if name == result["bound"] else ""), f"{value:.6g}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add `ldp privacy ...` to the app."""
    app.add_typer(privacy_app, name="privacy")
