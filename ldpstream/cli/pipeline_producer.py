"""`ldp spec validate|publish FILE` and `ldp simulate`: the device side of the pipeline from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ldp.base import LDPError
from ldpstream.services import ServicesConfig
from producer.collector import resolved_mechanisms, sampled_count
from producer.kafka import DeliveryError, ReportProducer, TopicError, ensure_topic
from producer.publish import publish_spec
from producer.simulator import simulate, wall_clock_ms
from producer.spec import CollectionSpec, NumericAttribute, SpecError, load_spec

console = Console()
errors = Console(stderr=True)
spec_app = typer.Typer(no_args_is_help=True, help="Collection specs: validate and publish.")


def _load(path: Path) -> CollectionSpec:
    """The spec with its mechanisms built (so an unbuildable spec fails here); exit 1 with the reason otherwise."""
    try:
        spec = load_spec(path)
        resolved_mechanisms(spec)
    except (SpecError, LDPError) as exc:
        errors.print(f"[red]invalid spec[/]: {exc}")
        raise typer.Exit(1) from exc
    return spec


def summary(spec: CollectionSpec) -> tuple[str, Table]:
    """A line on the spec's budget, sampling, windows and topic, and a table of its attributes' mechanisms."""
    k, mechanisms = sampled_count(spec), resolved_mechanisms(spec)
    line = (f"{spec.key}: eps = {spec.epsilon:g} per report; k = {k} of {len(spec.attributes)} attributes per "
            f"report (sampling {spec.sampling}), each at eps/k = {spec.epsilon / k:g}; windows "
            f"{', '.join([*spec.windows, 'all'])}; one report per window: {spec.one_report_per_window}; "
            f"topic {spec.topic} ({spec.partitions} partitions)")
    table = Table()
    for column in ("attribute", "type", "domain", "mechanism"):
        table.add_column(column)
    for a in spec.attributes:
        domain = f"[{a.range[0]:g}, {a.range[1]:g}]" if isinstance(a, NumericAttribute) else ", ".join(a.values)
        chosen = mechanisms[a.name] + (" (auto)" if a.mechanism == "auto" else "")
        table.add_row(a.name, a.type, domain, chosen)
    return line, table


@spec_app.command("validate")
def validate(file: Annotated[Path, typer.Argument(help="spec file (YAML or JSON)")]) -> None:
    """Check a spec; print OK and its summary (resolved mechanisms, k), or the error and exit 1."""
    spec = _load(file)
    line, table = summary(spec)
    console.print(f"[green]OK[/] {file}")
    console.print(line)
    console.print(table)


@spec_app.command("publish")
def publish(file: Annotated[Path, typer.Argument(help="spec file (YAML or JSON)")]) -> None:
    """Publish a spec to the compacted topic ldp.collections (a published version is immutable)."""
    spec = _load(file)
    try:
        result = publish_spec(spec, ServicesConfig.from_env().bootstrap)
    except (SpecError, TopicError, DeliveryError) as exc:
        errors.print(f"[red]not published[/]: {exc}")
        raise typer.Exit(1) from exc
    what = "published" if result.created else "already published with the same content"
    console.print(f"{result.key}: {what}; reports go to {result.topic}")


def simulate_command(
    spec_file: Annotated[Path, typer.Option("--spec", help="spec file (YAML or JSON)")],
    devices: Annotated[int, typer.Option(help="number of simulated devices, one report each")],
    rate: Annotated[float | None, typer.Option(help="at most this many reports per second")] = None,
    seed: Annotated[int, typer.Option(help="seed of the population, the device ids and the noise")] = 0,
    truth: Annotated[Path | None, typer.Option(help="write the exact population statistics here (JSON)")] = None,
    batch: Annotated[int, typer.Option(help="devices per vectorised chunk (and per message)")] = 1000,
    single: Annotated[bool, typer.Option("--single", help="one report per Kafka message")] = False,
    timestamp_ms: Annotated[int | None, typer.Option(help="report time of every report, ms since the epoch "
                                                          "(default: the wall clock)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the run's numbers as JSON")] = False,
) -> None:
    """Simulate a fleet with a known population: perturb in vectorised chunks and produce to Kafka."""
    spec = _load(spec_file)
    bootstrap = ServicesConfig.from_env().bootstrap
    try:
        ensure_topic(bootstrap, spec.topic, spec.partitions, exact=False)
        producer = ReportProducer(bootstrap)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=errors, disable=as_json) as progress:
            task = progress.add_task(f"{spec.key} -> {spec.topic}", total=devices)
            clock = wall_clock_ms if timestamp_ms is None else lambda: timestamp_ms
            result = simulate(spec, devices, producer, seed=seed, batch=batch, rate=rate, single=single,
                              clock_ms=clock, on_progress=lambda n: progress.advance(task, n))
    except (ValueError, TopicError, DeliveryError) as exc:
        errors.print(f"[red]simulation failed[/]: {exc}")
        raise typer.Exit(1) from exc
    if truth is not None:
        truth.write_text(json.dumps(result.truth, indent=2))
    numbers = {"collection": spec.key, "topic": spec.topic, "reports": result.reports, "messages": result.messages,
               "bytes": result.bytes, "seconds": round(result.seconds, 3),
               "reports_per_s": round(result.reports_per_s), "single": single, "batch": batch}
    if as_json:
        typer.echo(json.dumps(numbers))
        return
    console.print(f"{result.reports:,} reports in {result.messages:,} messages ({result.bytes / 1e6:.1f} MB) to "
                  f"{spec.topic} in {result.seconds:.2f} s = [bold]{result.reports_per_s:,.0f} reports/s[/]"
                  + (f"; truth in {truth}" if truth is not None else ""))


def register(app: typer.Typer) -> None:
    """Add `ldp spec ...` and `ldp simulate` to the app."""
    app.add_typer(spec_app, name="spec")
    app.command("simulate")(simulate_command)
