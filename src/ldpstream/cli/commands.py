"""The `ldp` app: one typer group whose commands (groups) live each in a module named after it, loaded when run.

`ldp --help` reads the table below and imports no command module; `ldp NAME ...` imports only NAME's module, and
the modules import the heavy parts (Kafka, Redis, SciPy, the servers) inside the commands that use them. Errors a
person can act on leave as one line (`ldpstream.cli.errors`); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from ldpstream.cli.errors import client_logs

# name -> (module under ldpstream.cli, short help: the first sentence of the command's own help, checked by a test)
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("services", "Make the spec-signing keys if missing, start the local Kafka broker and Redis server, or with "
                       "--cluster the local clusters (idempotent)."),
    "down": ("services", "Stop the local services that `ldp up` started."),
    "status": ("services", "Show each service, its address and whether it answers, the project's processes this "
                           "state dir's Prometheus targets announce (by service of the catalog), then the pipeline's "
                           "health (workers, crash loops, collections with messages waiting); exit 1 if a service "
                           "does not answer or the pipeline is unhealthy."),
    "demo": ("demo", "Publish a spec, send a simulated fleet's reports through the edge and Kafka into Redis, "
                     "compare with the truth."),
    "simulate": ("simulate", "Simulate a fleet with a known population: perturb in vectorised chunks and produce to "
                             "Kafka (or, with --via, send each enrolled device's report to the ingestion edge)."),
    "aggregate": ("aggregate", "Run aggregator workers in the foreground until SIGINT/SIGTERM (each batch applied "
                               "whole or not at all), and the poisoning auditor beside them."),
    "shuffle": ("shuffle", "Shuffle the reports of shuffled collections window by window until SIGINT/SIGTERM (each "
                           "window released once, in a Kafka transaction)."),
    "edge": ("edge", "Serve POST /v1/collections/NAME/reports, /healthz, /readyz, /metrics, /openapi.json until "
                     "SIGINT/SIGTERM; a process that exits is started again (its spool is drained when it is back)."),
    "estimate": ("estimate", "Live estimates of a collection with their standard errors."),
    "serve": ("serve", "Serve the read API (/collections, /collections/NAME/estimates and /series with a bearer token "
                       "of scope read, /metrics with scope metrics, /openapi.json), its web console at /console/ and "
                       "/healthz until SIGINT or SIGTERM."),
    "series": ("series", "One attribute's windows in a time range: estimates, standard errors, 95% intervals, reports "
                         "and privacy per window, as a terminal chart (or --json, --csv)."),
    "spec": ("spec", "Collection specs: validate and publish."),
    "devices": ("edge", "Enrol and revoke the devices the edge accepts reports from."),
    "tokens": ("tokens", "Issue, list and revoke the bearer tokens of the HTTP API."),
    "credentials": ("services", "The generated credentials of the local services."),
    "train": ("train", "Train models by LDP mini-batch SGD."),
    "mechanisms": ("mechanisms", "LDP mechanisms: variances, simulation."),
    "audit": ("mechanisms", "Lower-bound the epsilon a mechanism provides from samples (Clopper-Pearson); exit 1 if "
                            "above the claim."),
    "workload": ("workload", "Workload-adaptive factorization mechanism: optimise, compare."),
    "privacy": ("privacy", "Privacy accounting: amplification by shuffling."),
    "heavy-hitters": ("heavy_hitters", "Heavy hitters of strings over an open domain."),
    "poisoning": ("poisoning",
                  "Suspected poisoning: audit closed windows, show what was set aside, accept a new level."),
}


def module_commands(module: str) -> dict[str, Any]:
    """The commands that `ldpstream.cli.<module>.register` adds, by name."""
    holder = typer.Typer(rich_markup_mode=None)  # passed down to every command and group under it
    holder.callback()(lambda: None)  # a group, even for a module that registers one command
    importlib.import_module(f"ldpstream.cli.{module}").register(holder)
    return dict(typer.main.get_command(holder).commands)  # type: ignore[attr-defined]


class Placeholder(TyperCommand):
    """A command as `ldp --help` lists it: its name and short help, nothing imported."""

    def __init__(self, name: str, short_help: str) -> None:
        super().__init__(name, short_help=short_help, help=short_help)


class LazyGroup(TyperGroup):
    """The `ldp` group: lists the table's commands without importing them; imports one when it is run."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = {name: Placeholder(name, short) for name, (_, short) in COMMANDS.items()}

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in COMMANDS:
            command = module_commands(COMMANDS[name][0])[name]
        return name, command, rest


# Help and usage errors as plain text: typer's "rich" mode reads square brackets as markup and drops them
# ("P[report 1 | bit 0]" printed as "P"); no help text here is markup.
app = typer.Typer(cls=LazyGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="ldpstream: private telemetry over Kafka.")
DEBUG = {"on": False}


@app.callback()
def root(debug: bool = typer.Option(False, "--debug", help="show the full traceback of an error")) -> None:
    """ldpstream: private telemetry over Kafka."""
    DEBUG["on"] = debug
    client_logs(verbose=debug)


def run(argv: list[str] | None = None) -> Any:
    """Run the app: errors a person can act on as one line, exit status 1."""
    from ldpstream.cli.errors import explain

    try:
        return app(args=argv, standalone_mode=True)
    except Exception as exc:  # the one boundary: anything the commands did not turn into a message themselves
        message = explain(exc)
        if message is None or DEBUG["on"]:
            raise
        typer.echo(f"error: {message}", err=True)
        sys.exit(1)
