"""`ldp simulate`: a device fleet with a known population, perturbed in vectorised chunks and sent to Kafka."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ldpstream.cli.errors import require_services
from ldpstream.cli.output import console, errors, fail, progress
from ldpstream.cli.spec import load_checked

if TYPE_CHECKING:
    from ldpstream.contract.spec import CollectionSpec
    from ldpstream.simulator.edge_client import FleetAnswers



def simulate_command(
    devices: Annotated[int, typer.Option(help="number of simulated devices, one report each")],
    spec_file: Annotated[Path | None, typer.Option("--spec", help="spec file (YAML or JSON)")] = None,
    rate: Annotated[float | None, typer.Option(help="at most this many reports per second")] = None,
    seed: Annotated[int, typer.Option(help="seed of the population, the device ids and the noise")] = 0,
    truth: Annotated[Path | None, typer.Option(help="write the exact population statistics here (JSON)")] = None,
    batch: Annotated[int, typer.Option(help="devices per vectorised chunk (and per message)")] = 1000,
    single: Annotated[bool, typer.Option("--single", help="one report per Kafka message")] = False,
    timestamp_ms: Annotated[int | None, typer.Option(help="report time of every report, ms since the epoch "
                                                          "(default: the wall clock)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the run's numbers as JSON")] = False,
    via: Annotated[str | None, typer.Option(help="send through the ingestion edge at this URL (HTTP, one signed "
                                                 "request per device) instead of to Kafka")] = None,
    credentials: Annotated[Path | None, typer.Option(help="with --via: the enrolled devices (`ldp devices "
                                                          "enroll --out`)")] = None,
    concurrency: Annotated[int, typer.Option(help="with --via: requests in flight")] = 64,
    ca_file: Annotated[Path | None, typer.Option(help="with an https --via or --join: the CA certificate(s) that "
                                                      "signed the edge's (default: the system's)")] = None,
    join: Annotated[str | None, typer.Option(help="devices join through the edge at this URL like phones: enrol "
                                                  "with --token, fetch and verify the spec, apply --policy, report")
                    ] = None,
    token: Annotated[Path | None, typer.Option(help="with --join: the enrolment token (`ldp devices mint-token "
                                                    "--out`)")] = None,
    policy: Annotated[Path | None, typer.Option(help="with --join: the devices' privacy policy (JSON or YAML; "
                                                     "default: the SDK's defaults)")] = None,
    trust: Annotated[Path | None, typer.Option(help="with --join: the keys the devices pin (`ldp spec keys "
                                                    "--json`; default: this machine's)")] = None,
    train: Annotated[str | None, typer.Option(help="with --join: the devices train this job (`ldp train publish`) "
                                                   "on their own rows of --dataset, instead of reporting to --spec")
                     ] = None,
    dataset: Annotated[str, typer.Option(help="with --train: the devices' rows (fashion-mnist)")] = "fashion-mnist",
    split: Annotated[str, typer.Option(help="with --train: iid (one example per device) or non-iid (ten examples "
                                            "of two classes)")] = "iid",
    state_dir: Annotated[Path | None, typer.Option(help="with --train: where the devices keep their state "
                                                        "(default: a temporary directory)")] = None,
    timeout_s: Annotated[float, typer.Option(help="with --train: stop after this many seconds")] = 3600.0,
) -> None:
    """Simulate a fleet with a known population: perturb in vectorised chunks and produce to Kafka (or, with
    --via, send each enrolled device's report to the ingestion edge)."""
    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.kafka import DeliveryError, ReportProducer, TopicError, ensure_topic
    from ldpstream.runtime.settings import Settings
    from ldpstream.simulator.simulator import simulate

    tls = None if ca_file is None else ssl.create_default_context(cafile=ca_file)
    if train is not None:
        from ldpstream.cli.train_jobs import simulate_training

        if join is None or token is None:
            fail("--train needs --join URL and --token FILE (`ldp devices mint-token --job JOB --out FILE`)", code=2)
        simulate_training(join, token, train, dataset, devices, split, policy, trust, seed, concurrency, state_dir,
                          timeout_s, as_json, tls)
        return
    if spec_file is None:
        fail("--spec is needed (or --join with --train)", code=2)
    spec = load_checked(spec_file)
    if join is not None:
        simulate_join(spec, devices, join, token, policy, trust, seed, concurrency, truth, as_json, tls)
        return
    if via is not None:
        simulate_via(spec, devices, via, credentials, seed, concurrency, truth, as_json, tls)
        return
    if timestamp_ms is not None:
        refused_in_time(spec, timestamp_ms, now_ms())
    require_services(redis=False)
    bootstrap = Settings.from_env().bootstrap
    try:
        ensure_topic(bootstrap, spec.topic, spec.partitions, exact=False)
        producer = ReportProducer(bootstrap)
        with progress(errors, disable=as_json) as shown:
            task = shown.add_task(f"{spec.key} -> {spec.topic}", total=devices)
            clock = now_ms if timestamp_ms is None else lambda: timestamp_ms
            result = simulate(spec, devices, producer, seed=seed, batch=batch, rate=rate, single=single,
                              clock_ms=clock, on_progress=lambda n: shown.advance(task, n))
    except (ValueError, TopicError, DeliveryError) as exc:
        fail(str(exc), label="simulation failed")
    if truth is not None:
        truth.write_text(json.dumps(result.truth, indent=2))
    numbers = {"collection": spec.key, "topic": spec.topic, "reports": result.reports, "messages": result.messages,
               "bytes": result.bytes, "seconds": round(result.seconds, 3),
               "reports_per_s": round(result.reports_per_s), "single": single, "batch": batch}
    if as_json:
        typer.echo(json.dumps(numbers))
        return
    console.print(f"{result.reports:,} reports in {result.messages:,} messages ({result.bytes / 1e6:.1f} MB) to "
                  f"{spec.topic} in {result.seconds:.2f} s = {result.reports_per_s:,.0f} reports/s"
                  + (f"; truth in {truth}" if truth is not None else ""))


def refused_in_time(spec: CollectionSpec, timestamp_ms: int, now: int) -> None:
    """Exit 1 before sending anything when every report, stamped `timestamp_ms`, would be refused for its time by
    the rule the edge and the workers apply (`ldpstream.contract.validation.time_problems`)."""
    import numpy as np

    from ldpstream.contract.shuffled import report_path
    from ldpstream.contract.validation import MAX_FUTURE_SKEW_MS, max_age_ms, time_problems

    future, stale = time_problems(spec, np.array([timestamp_ms], dtype=np.int64), now)
    if stale[0]:
        fail(f"nothing sent: every report stamped --timestamp-ms {timestamp_ms} would be refused as stale, "
             f"{(now - timestamp_ms) / 1000:,.0f} s old, and {spec.name} admits reports up to "
             f"{max_age_ms(spec) / 1000:,.0f} s old (its first window, {spec.windows[0] if spec.windows else 'none'}"
             f"{', and its grace once the window closed' if report_path(spec).shuffled else ''})")
    if future[0]:
        fail(f"nothing sent: every report stamped --timestamp-ms {timestamp_ms} would be refused as from the future, "
             f"{(timestamp_ms - now) / 1000:,.0f} s ahead of this clock (at most {MAX_FUTURE_SKEW_MS / 1000:,.0f} s "
             f"are allowed)")


def simulate_via(spec: CollectionSpec, devices: int, via: str, credentials: Path | None, seed: int,
                 concurrency: int, truth: Path | None, as_json: bool, tls: ssl.SSLContext | None = None) -> None:
    """`ldp simulate --via URL`: the fleet's reports as signed HTTP requests of enrolled devices."""
    from ldpstream.contract.auth import load_credentials
    from ldpstream.simulator.edge_client import send_fleet

    if credentials is None:
        fail("--via needs --credentials (a file from `ldp devices enroll`)", code=2)
    enrolled = [c for c in load_credentials(credentials) if c.collection == spec.name][:devices]
    if len(enrolled) < devices:
        fail(f"{credentials} holds {len(enrolled)} devices of {spec.name}, not {devices}")
    result, answers = send_fleet(spec, enrolled, via, seed=seed, concurrency=concurrency, tls=tls)
    if truth is not None:
        truth.write_text(json.dumps(result.truth, indent=2))
    numbers = {"collection": spec.key, "via": via, "requests": result.messages, "acknowledged": result.reports,
               "statuses": answers.statuses, "refused": answers.refused, "seconds": round(result.seconds, 3),
               "requests_per_s": round(result.messages / result.seconds)}
    if as_json:
        typer.echo(json.dumps(numbers))
    else:
        console.print(f"{result.messages:,} requests to {via} in {result.seconds:.2f} s: "
                      f"{answers.acknowledged:,} admitted, {result.messages - answers.acknowledged:,} not")
        print_refusals(answers)
    if answers.acknowledged < devices:
        raise typer.Exit(1)


def print_refusals(answers: FleetAnswers) -> None:
    """What the edge refused: per reason, how many requests and the edge's words for the first one."""
    for reason, count in sorted(answers.refused.items(), key=lambda kv: -kv[1]):
        errors.print(f"{count:,} refused ({reason}): {answers.details[reason]}")


def simulate_join(spec: CollectionSpec, devices: int, url: str, token: Path | None, policy: Path | None,
                  trust: Path | None, seed: int, concurrency: int, truth: Path | None, as_json: bool,
                  tls: ssl.SSLContext | None = None) -> None:
    """`ldp simulate --join URL`: devices that enrol, verify the spec and apply the policy, then report."""
    import asyncio

    from ldpstream.contract.signatures import TrustedKeys
    from ldpstream.device.policy import PrivacyPolicy
    from ldpstream.runtime.join_keys import pinned_keys
    from ldpstream.runtime.settings import Settings
    from ldpstream.simulator.edge_client import join_fleet, send_fleet

    if token is None:
        fail("--join needs --token (a file from `ldp devices mint-token --out`)", code=2)
    keys = TrustedKeys.from_json(json.loads(trust.read_text()) if trust else pinned_keys(Settings.from_env()))
    rules = PrivacyPolicy.load(policy) if policy else PrivacyPolicy()
    joined = asyncio.run(join_fleet(url, spec.name, token.read_text().strip(), keys, rules, devices, concurrency,
                                    tls))
    numbers: dict[str, object] = {"collection": spec.name, "join": url, "devices": devices,
                                  "joined": len(joined.credentials), "refused": joined.refused,
                                  "reasons": joined.reasons, "enrol_failures": joined.enrol_failures}
    if joined.spec is not None:
        result, answers = send_fleet(joined.spec, joined.credentials, url, seed=seed, concurrency=concurrency,
                                     tls=tls)
        if truth is not None:
            truth.write_text(json.dumps(result.truth, indent=2))
        numbers.update({"spec": joined.spec.key, "acknowledged": answers.acknowledged, "statuses": answers.statuses,
                        "refused": answers.refused,
                        "seconds": round(result.seconds, 3)})
    if as_json:
        typer.echo(json.dumps(numbers))
    else:
        console.print(f"{len(joined.credentials):,} of {devices:,} devices joined {spec.name} through {url}"
                      + (f" and reported: {numbers['statuses']}" if joined.spec is not None else ""))
        for code, count in sorted(joined.refused.items()):
            console.print(f"{count:,} device(s) refused the spec ({code}): {joined.reasons[code]}")
        for status, count in sorted(joined.enrol_failures.items()):
            console.print(f"{count:,} device(s) could not enrol: {status}")
        if joined.spec is not None:
            print_refusals(answers)
    unsent = joined.spec is not None and numbers["acknowledged"] != len(joined.credentials)
    if joined.enrol_failures or unsent:  # a refusal is the policy at work, not a failure
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `ldp simulate` to the app."""
    app.command("simulate")(simulate_command)
