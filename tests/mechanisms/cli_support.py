"""Running a command of the Typer app that the `app` fixture (tests/mechanisms/conftest.py) makes."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

runner = CliRunner()


def invoke(app: typer.Typer, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output
