"""`ldp poisoning`: audit closed windows for fake devices' reports, show what each window set aside, and accept an
attribute's new level as genuine."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ldpstream.cli.errors import CliError, client_logs, published_plan, require_services
from ldpstream.cli.output import styled
from ldpstream.cli.output import wide as console

if TYPE_CHECKING:
    from ldpstream.aggregator.plans import Plan

poisoning_app = typer.Typer(help="Suspected poisoning: audit closed windows, show what was set aside, accept a "
                                 "new level.",
                            no_args_is_help=True)
FOLLOW_S = 30.0


@poisoning_app.command("audit")
def audit(name: str = typer.Argument(..., help="collection name"),
          window: str = typer.Option(None, help="1h:<start_ms> (one window); default: every closed window not "
                                                "audited yet"),
          version: int = typer.Option(None, help="spec version (default: the newest published)"),
          follow: bool = typer.Option(False, help="keep auditing each window as it closes (until SIGINT)"),
          force: bool = typer.Option(False, help="audit --window even if it is still open (a partial audit)")) -> None:
    """Read closed windows' reports again from Kafka, run every poisoning detector on them, keep the reports they set
    aside in ldp.setaside and the window's record beside its live statistics."""
    from ldpstream.aggregator.audit import AuditError, audit_window, closed_windows
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.settings import Settings

    require_services()
    logging.basicConfig(level=logging.INFO if follow else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    client_logs(verbose=follow)
    cfg = Settings.from_env()
    plan = published_plan(cfg.bootstrap, name, version)
    store = RedisStore(cfg.redis)
    while True:
        if window is not None:
            todo = [window_argument(plan, window, "--window")]
        else:
            todo = closed_windows(store, plan, now_ms())
        for length, start_ms in todo:
            try:
                result = audit_window(cfg.bootstrap, store, plan, length, start_ms, force=force)
            except AuditError as exc:
                raise CliError(str(exc)) from exc
            set_aside = sum(d.set_aside for d in result.attributes.values())
            typer.echo(f"{plan.spec.key} {length}:{start_ms}: {result.reports:,} reports audited, "
                       f"{set_aside:,.0f} set aside ({len(result.set_aside)} message(s) to ldp.setaside)")
        if not follow or window is not None:
            return
        time.sleep(FOLLOW_S)


@poisoning_app.command("status")
def status(name: str = typer.Argument(..., help="collection name"),
           version: int = typer.Option(None, help="spec version (default: the newest published)"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Each window's suspected poisoning: where the figure comes from, the reports set aside and the alert."""
    from ldpstream.aggregator.estimates import collection_estimates
    from ldpstream.aggregator.store import ALL_TIME, RedisStore
    from ldpstream.runtime.settings import Settings

    require_services()
    cfg = Settings.from_env()
    plan = published_plan(cfg.bootstrap, name, version)
    store = RedisStore(cfg.redis)
    windows = [(w, s) for v, w, s in store.windows(name) if v == plan.spec.version and w != ALL_TIME]
    rows = []
    for w, s in [*windows, (ALL_TIME, 0)]:
        result = collection_estimates(store, plan, f"{w}:{s}" if w != ALL_TIME else ALL_TIME)
        rows.append({"window": result["window"], "reports": result["reports"], **result["poisoning"]})
    if as_json:
        typer.echo(json.dumps(rows))
        return
    table = Table("window", "reports", "source", "reference", "set aside", "fraction", "alert", "suspects",
                  title=f"{plan.spec.key}: suspected poisoning")
    for r in rows:
        suspects = "; ".join(f"{a}: {', '.join(map(str, e['suspects'][:8]))}"
                             for a, e in r["attributes"].items() if e["suspects"])
        reference = f"{r['reference']['windows']} window(s)" if r["reference"] else "-"
        table.add_row(r["window"], f"{r['reports']:,}", r["source"], reference, f"{r['set_aside']:,.0f}",
                      f"{100 * r['set_aside_fraction']:.3f}%", styled(("ALERT" if r["alert"] else "", "red")), suspects)
    console.print(table)


@poisoning_app.command("accept")
def accept(name: str = typer.Argument(..., help="collection name"),
           attribute: str = typer.Argument(..., help="the attribute whose new level is genuine"),
           start: str = typer.Option(..., "--from", help="<length>:<start_ms>: the first window of the new level"),
           version: int = typer.Option(None, help="spec version (default: the newest published)")) -> None:
    """Accept an attribute's new level as genuine: from that window on its references and the tests over windows
    forget the windows before it, and audits made before now of the windows since no longer count for it."""
    from ldpstream.aggregator import poisoning
    from ldpstream.aggregator.store import RedisStore
    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.settings import Settings

    require_services()
    cfg = Settings.from_env()
    plan = published_plan(cfg.bootstrap, name, version)
    names = [a.name for a in plan.spec.attributes]
    if attribute not in names:
        raise CliError(f"{plan.spec.key} has no attribute {attribute!r} (it has {', '.join(names)})")
    length, first = window_argument(plan, start, "--from")
    try:
        poisoning.accept(RedisStore(cfg.redis), plan, length, names.index(attribute), first, now_ms())
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    typer.echo(f"{plan.spec.key} {attribute}: {length} windows from {first} are its new level; the windows before "
               f"are no longer its references")


def window_argument(plan: Plan, text: str, flag: str) -> tuple[str, int]:
    """(length, start ms) from `<length>:<start_ms>` with a length of the spec's; CliError otherwise."""
    length, _, start = text.partition(":")
    if length not in plan.spec.windows or not start.isdigit():
        raise CliError(f"{flag} is <length>:<start_ms> with a length of {plan.spec.windows}")
    return length, int(start)


def register(app: typer.Typer) -> None:
    """Add `ldp poisoning`."""
    app.add_typer(poisoning_app, name="poisoning")
