"""Square brackets print as they are: in an error (a spec's "range must be [lo, hi]"), in help texts and in tables.
rich reads "[word ...]" as a markup tag and drops it, so every console of the command line has markup off
(`ldpstream.cli.output.plain_console`) and typer prints help without rich markup."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

import ldpstream.cli
from ldpstream.cli.commands import app
from ldpstream.cli.output import estimates_table, plain_console

runner = CliRunner()


def test_an_invalid_range_says_lo_and_hi(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nversion: 1\nepsilon: 1.0\nattributes:\n  - {name: x, type: numeric, range: [5, 1]}\n")
    result = runner.invoke(app, ["spec", "validate", str(bad)])
    assert result.exit_code == 1
    assert "range must be [lo, hi] with lo < hi" in result.output, result.output


def test_help_keeps_its_brackets() -> None:
    result = runner.invoke(app, ["mechanisms", "privacy", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "P[report 1 | permanent bit 0]" in result.output, result.output


def test_a_table_keeps_a_label_in_brackets() -> None:
    result = {"collection": "c", "version": 1, "window": "all", "reports": 10,
              "attributes": {"band": {"frequencies": {"[lo, hi]": {"estimate": 0.5, "stderr": 0.1}}}}}
    console = plain_console(width=200)
    with console.capture() as captured:
        console.print(estimates_table(result))
    assert "[lo, hi]" in captured.get()


def test_every_console_of_the_command_line_prints_text_as_it_is() -> None:
    for info in pkgutil.iter_modules(ldpstream.cli.__path__):
        module = importlib.import_module(f"ldpstream.cli.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, Console):
                assert not value._markup, f"ldpstream.cli.{info.name}.{name} reads markup"
