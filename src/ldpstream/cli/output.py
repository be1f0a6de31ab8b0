"""How commands print: a flat result as one JSON line or a two-column table; estimates as a table; an error as one
line.

Every console of the command line comes from `plain_console`: rich's markup is off, because the text printed (an
error's message, a spec's labels, a path) is not markup, and rich reads any "[word ...]" in it as a tag and drops it
("range must be [lo, hi]" printed as "range must be "). Styles come from `Text` objects (`styled`), never from tags.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column, Table
from rich.text import Text


def plain_console(stderr: bool = False, **options: Any) -> Console:
    """A rich console that prints strings as they are (no markup, no highlighting)."""
    return Console(stderr=stderr, markup=False, highlight=False, **options)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (string, style) pairs: `styled(("error:", "red"), " ", message)`."""
    return Text.assemble(*parts)


console = plain_console()
errors = plain_console(stderr=True, soft_wrap=True)  # one line per error, whatever the width (a path is never cut)
# wide tables: the terminal's width (or COLUMNS), 120 columns when piped
wide = plain_console(width=None if console.is_terminal or os.environ.get("COLUMNS") else 120)


def name_column(header: str) -> Column:
    """A column of names (attributes, labels, addresses): never wrapped or cut; the other columns give way."""
    return Column(header, no_wrap=True, min_width=len(header))


def figure_column(header: str) -> Column:
    """A column of figures: as narrow as its header's longest word, a figure wider than that folded (every digit
    kept), never cut."""
    return Column(header, overflow="fold", min_width=max(len(word) for word in header.split()))


def progress(on: Console, disable: bool = False, transient: bool = False) -> Progress:
    """A progress display for long work: per task its description, a bar, "done/total" and the time left (then
    elapsed)."""
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                    TextColumn("left"), TimeRemainingColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                    console=on, disable=disable, transient=transient)


def fail(message: str, code: int = 1, label: str = "error") -> NoReturn:
    """Print "LABEL: MESSAGE" on standard error (one line) and exit with `code` (2: a usage error)."""
    errors.print(styled((f"{label}:", "red"), " ", message))
    raise typer.Exit(code)


def print_fields(payload: dict[str, Any], as_json: bool) -> None:
    """`payload` as JSON, or as a field/value table (floats to 6 significant digits)."""
    if as_json:
        typer.echo(json.dumps(payload))
        return
    table = Table("field", "value")
    for key, value in payload.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    console.print(table)


def estimates_table(result: dict[str, Any], truth: dict[str, Any] | None = None) -> Table:
    """A table of a collection's estimates (and, given the truth, |error| / stderr)."""
    title = f"{result['collection']} v{result['version']} window {result['window']}: {result['reports']:,} reports"
    columns = [name_column("attribute"), name_column("value"), figure_column("estimate"), figure_column("stderr"),
               *([figure_column("truth"), figure_column("|err|/stderr")] if truth else [figure_column("95% CI")])]
    table = Table(*columns, title=title)
    for name, entry in result["attributes"].items():
        kind = "frequencies" if "frequencies" in entry else "answers"
        rows = ([("mean", entry["mean"], entry["stderr"], (truth or {}).get(name, {}).get("mean"))]
                if "mean" in entry else
                [(v, e["estimate"], e["stderr"], (truth or {}).get(name, {}).get(kind, {}).get(v))
                 for v, e in entry[kind].items()])
        rows += [(f"{v} mean", e["estimate"], e["stderr"], (truth or {}).get(name, {}).get("means", {}).get(v))
                 for v, e in entry.get("means", {}).items()]
        rows += [(f"quantile {level}", q["estimate"], q["stderr"], None)  # a distribution mechanism's (sw)
                 for level, q in (entry.get("distribution") or {}).get("quantiles", {}).items()]
        for i, (label, est, se, true) in enumerate(rows):
            cells: list[str | Text] = [name if i == 0 else "", str(label), _fmt(est), _fmt(se)]
            if truth is not None and true is None:
                cells += ["-", "-"]
            elif truth is not None:
                z = abs(est - true) / se if None not in (est, se) and se > 0 else float("nan")
                cells += [_fmt(true), styled((f"{z:.2f}", "green" if z < 3 else "red"))]
            else:
                cells.append("-" if None in (est, se) else f"[{_fmt(est - 1.96 * se)}, {_fmt(est + 1.96 * se)}]")
            table.add_row(*cells)
    return table


def poisoning_table(result: dict[str, Any]) -> Table:
    """A window's suspected poisoning (`ldpstream.aggregator.estimates.poisoning_summary`): per attribute the
    detectors' verdict, the reports set aside, the suspects, the gain removed and, where something was set aside,
    the defended estimates of the suspects beside the live ones."""
    p = result["poisoning"]
    reference = f"{p['reference']['windows']} earlier window(s), {p['reference']['reports']:,} reports" \
        if p["reference"] else "none"
    title = styled(f"suspected poisoning ({p['source']}; reference: {reference}): {p['set_aside']:,.0f} report(s) set "
                   f"aside, {100 * p['set_aside_fraction']:.3f}% (alert above {100 * p['alert_threshold']:.2f}%)",
                   (" ALERT" if p["alert"] else "", "red"))
    table = Table(name_column("attribute"), figure_column("status"), figure_column("set aside"),
                  figure_column("gain removed"), name_column("suspect"), figure_column("live"),
                  figure_column("defended"), title=title, box=box.SIMPLE_HEAVY)  # no rules between columns: 80 suffice
    for name, entry in p["attributes"].items():
        live = result["attributes"][name]
        shown = entry["suspects"][:10] or [""]
        for i, label in enumerate(shown):
            before, after = _suspect_estimates(live, entry["estimate"], label)
            table.add_row(name if i == 0 else "", entry["status"] if i == 0 else "",
                          f"{entry['set_aside']:,.0f}" if i == 0 else "",
                          _fmt(entry["gain_removed"]) if i == 0 else "", str(label), before, after)
    return table


def _suspect_estimates(live: dict[str, Any], defended: dict[str, Any], label: str) -> tuple[str, str]:
    """The live and defended estimates of one suspect (a mean: the attribute's)."""
    if "mean" in live:
        return _fmt(live.get("mean")), _fmt(defended.get("mean"))
    if not label:
        return "", ""
    before = live.get("frequencies", {}).get(label, {}).get("estimate")
    after = defended.get("frequencies", {}).get(label, {}).get("estimate")
    return _fmt(before), _fmt(after)


def shuffle_table(summary: dict[str, Any]) -> Table:
    """A shuffled collection's released batches (`ldpstream.aggregator.estimates.shuffle_summary`)."""
    table = Table("batch window (UTC)", "reports", "rolled in", "eps0", "central epsilon", "delta", "bound",
                  title=f"shuffled: {len(summary['batches'])} batch(es), min_batch {summary['min_batch']:,}")
    for b in summary["batches"]:
        start = datetime.fromtimestamp(b["window_ms"] / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(start, f"{b['reports']:,}", f"{b['rolled']:,}", f"{b['epsilon0']:g}",
                      f"{b['epsilon']:.4g}", f"{b['delta']:g}", b["bound"])
    return table


def _fmt(x: float | None) -> str:
    import numpy as np

    if x is None or not np.isfinite(x):
        return "-"
    return f"{x:.4g}"
