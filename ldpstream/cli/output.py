"""How commands print a flat result: one JSON line, or a two-column table."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def print_fields(payload: dict[str, Any], as_json: bool) -> None:
    """`payload` as JSON, or as a field/value table (floats to 6 significant digits)."""
    if as_json:
        typer.echo(json.dumps(payload))
        return
    table = Table("field", "value")
    for key, value in payload.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    console.print(table)
