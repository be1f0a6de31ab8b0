"""The `ldp` command line (`ldpstream.cli.commands`: the app and the table of its commands).

It comes with the server install (`pip install 'ldpstream[server]'`); the device SDK's base install has no typer
and gets one line saying so instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

NEEDS_SERVER = ("error: the `ldp` command line comes with the server install: pip install 'ldpstream[server]' "
                "(this install is the device SDK, `ldpstream.device`)")


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the `ldp` console script."""
    if importlib.util.find_spec("typer") is None:
        print(NEEDS_SERVER, file=sys.stderr)
        sys.exit(1)
    from ldpstream.cli.commands import run

    return run(argv)
