"""Fixtures of the mechanism tests: the `ldp mechanisms` / `ldp audit` commands on a Typer app of their own."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from ldpstream.cli import mechanisms

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    mechanisms.register(app)
    return app
