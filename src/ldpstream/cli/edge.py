"""`ldp edge`: the HTTP ingestion edge (one or more processes on one port); `ldp devices enroll|revoke`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from ldpstream.cli.errors import CliError, require_services

devices_app = typer.Typer(no_args_is_help=True, help="Enrol and revoke the devices the edge accepts reports from.")


def edge(host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
         port: Annotated[int, typer.Option(min=1, max=65535)] = 8080,
         workers: Annotated[int, typer.Option(min=1, max=64, help="edge processes sharing the port "
                                                                  "(SO_REUSEPORT), each with its own spool")] = 1,
         max_reports: Annotated[int, typer.Option(help="reports per request (a device's outbox)")] = 100,
         rate: Annotated[int, typer.Option(help="requests per device per second")] = 20,
         max_connections: Annotated[int, typer.Option(min=1, help="open connections per process; more are "
                                                                  "answered 503")] = 10_000,
         idle_timeout_s: Annotated[float, typer.Option(help="close a connection without a complete request "
                                                            "for this long")] = 60.0,
         body_timeout_s: Annotated[float, typer.Option(help="answer 408 to a body that has not arrived within "
                                                            "this")] = 30.0,
         enrol_per_address: Annotated[int, typer.Option(min=1, help="enrolments a minute from one client address "
                                                                    "(more: 429)")] = 300,
         enrol_per_token: Annotated[int, typer.Option(min=1, help="enrolments a second with one token "
                                                                  "(more: 429)")] = 2000,
         enrol_per_address_day: Annotated[int, typer.Option(min=0, help="enrolments a day from one client address "
                                                                        "(more: 429; 0: no daily cap)")] = 0,
         cors_origin: Annotated[list[str] | None, typer.Option(help="an origin whose browser pages may call the edge "
                                                                    "(repeatable; none by default)")] = None,
         tls_cert: Annotated[Path | None, typer.Option(help="serve HTTPS with this certificate chain (PEM)")] = None,
         tls_key: Annotated[Path | None, typer.Option(help="the certificate's private key (PEM)")] = None) -> None:
    """Serve POST /v1/collections/NAME/reports, /healthz, /readyz, /metrics, /openapi.json until SIGINT/SIGTERM;
    a process that exits is started again (its spool is drained when it is back). /metrics, from any process,
    sums them all. Devices join through it too: POST /v1/enroll, GET /v1/collections/NAME (the signed pointer) and
    /v1/collections/NAME/specs/VERSION, DELETE /v1/collections/NAME/devices/ID."""
    from prometheus_client.multiprocess import mark_process_dead

    from ldpstream.edge.app import STOP_S
    from ldpstream.edge.processes import start_edge
    from ldpstream.runtime.metrics import MULTIPROCESS_DIR
    from ldpstream.runtime.process import port_in_use
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.supervisor import Supervisor
    from ldpstream.runtime.targets import TOKEN, announce

    if port_in_use(port, host if host not in ("0.0.0.0", "::") else "127.0.0.1"):
        raise CliError(f"cannot listen on {host}:{port}: the port is in use by another process (stop it, or pass "
                       f"--port)")
    require_services()
    cfg = Settings.from_env()
    state = cfg.state_dir / "edge"
    tls = ["--tls-cert", str(tls_cert), "--tls-key", str(tls_key)] if tls_cert or tls_key else []
    args = ["--max-reports", str(max_reports), "--rate", str(rate), "--max-connections", str(max_connections),
            "--idle-timeout-s", str(idle_timeout_s), "--body-timeout-s", str(body_timeout_s),
            "--enrol-per-address", str(enrol_per_address), "--enrol-per-token", str(enrol_per_token),
            "--enrol-per-address-day", str(enrol_per_address_day),
            *[a for origin in cors_origin or [] for a in ("--cors-origin", origin)],
            *(["--reuse-port"] if workers > 1 else []), *tls]
    metrics_dir = state / "metrics" / str(port)  # the processes' summed metrics: this group's, from zero
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)

    def start(i: int) -> subprocess.Popen[bytes]:
        return start_edge(port, state / "spool" / f"{port}-{i}", *args, host=host,
                          env={MULTIPROCESS_DIR: str(metrics_dir)})

    if not tls:  # to the local Prometheus (`ldp up --prometheus`), which reads /metrics over plain HTTP
        announce(cfg, "ldp-edge", port, TOKEN, host=host)
    typer.echo(f"edge: {workers} process(es) on http{'s' if tls else ''}://{host}:{port}")
    status = Supervisor(f"ldp edge (port {port})", workers, start,
                        lambda _i, proc: mark_process_dead(proc.pid, str(metrics_dir)),  # its gauges leave the sum;
                        stop_timeout_s=STOP_S).run()  # its counters stay
    raise typer.Exit(status)


@devices_app.command("enroll")
def enroll(collection: Annotated[str, typer.Option(help="collection name")],
           count: Annotated[int, typer.Option(min=1, max=10_000_000, help="devices to enrol")],
           out: Annotated[Path, typer.Option(help="write the credentials here (JSON; keep it secret)")]) -> None:
    """Issue credentials (device id + key) for COUNT new devices; the edge stores only their generation."""
    from ldpstream.edge.devices import DeviceRegistry
    from ldpstream.edge.keyring import Keyring
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    require_services(kafka=False)
    registry = DeviceRegistry(redis_client(cfg.redis, 10.0), Keyring.create(cfg.edge_key))
    credentials = registry.enroll(collection, count)
    out.write_text(json.dumps([c.to_json() for c in credentials]))
    out.chmod(0o600)
    typer.echo(f"{count} device(s) enrolled in {collection}; credentials in {out}")


@devices_app.command("mint-token")
def mint_token(collection: Annotated[list[str] | None, typer.Option(
                   help="a collection the token enrols in (repeatable)")] = None,
               job: Annotated[list[str] | None, typer.Option(help="a training job the token enrols in (repeatable)")]
               = None, *,
               uses: Annotated[int, typer.Option(min=1, max=10**9, help="devices the token may enrol")],
               out: Annotated[Path, typer.Option(help="write the token here (0600; a bearer secret)")],
               expires: Annotated[str, typer.Option(help="lifetime: <n>s, <n>m, <n>h or <n>d")] = "30d") -> None:
    """Mint an enrolment token devices exchange for credentials at POST /v1/enroll (signed with the enrolment-token
    key; the edge counts its uses in Redis). What an app's backend hands its devices."""
    from ldpstream.contract.clock import now_ms
    from ldpstream.contract.enrolment import mint, new_token
    from ldpstream.runtime.join_keys import load_token_key
    from ldpstream.runtime.secrets import replace_secret
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.tokens import parse_ttl

    try:
        lifetime = parse_ttl(expires)
        if lifetime is None:
            raise ValueError("an enrolment token must expire")
        now = now_ms()
        token = new_token([*(collection or []), *(f"job/{j}" for j in job or [])], uses, now, now + lifetime)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    replace_secret(out, mint(load_token_key(Settings.from_env()), token).encode())
    typer.echo(f"token {token.id[:12]} for {', '.join(token.collections)}: {uses} use(s), expires at "
               f"{token.expires_ms} ms; in {out}")


@devices_app.command("revoke")
def revoke(collection: Annotated[str, typer.Option(help="collection name")],
           device: Annotated[list[str], typer.Argument(help="device ids")]) -> None:
    """Revoke devices: every request they sign is answered 401 from now on."""
    from ldpstream.edge.devices import DeviceRegistry
    from ldpstream.edge.keyring import Keyring
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings

    cfg = Settings.from_env()
    require_services(kafka=False)
    found = DeviceRegistry(redis_client(cfg.redis, 10.0), Keyring(cfg.edge_key)).revoke(collection, device)
    typer.echo(f"{found} of {len(device)} device(s) revoked in {collection}")
    if found < len(device):
        raise typer.Exit(1)


@devices_app.command("rotate-key")
def rotate_key() -> None:
    """Add a master-key generation: new enrolments use it; devices of older generations keep reporting."""
    from ldpstream.edge.keyring import Keyring
    from ldpstream.runtime.settings import Settings

    keyring = Keyring.create(Settings.from_env().edge_key)
    generation = keyring.rotate()
    typer.echo(f"master key generation {generation} made; generations in service: {keyring.generations}")


@devices_app.command("retire-key")
def retire_key(generation: Annotated[int, typer.Argument(help="the generation to retire")]) -> None:
    """Delete a master-key generation: its devices are answered 401 from now on (they enrol again)."""
    from ldpstream.edge.keyring import Keyring
    from ldpstream.runtime.settings import Settings

    keyring = Keyring(Settings.from_env().edge_key)
    try:
        keyring.retire(generation)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"master key generation {generation} retired; generations in service: {keyring.generations}")


@devices_app.command("tokens")
def tokens(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """The record of enrolment tokens: how many devices each enrolled (never which), and whether it is revoked."""
    from ldpstream.edge.join import token_usage
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings

    require_services(kafka=False)
    usage = token_usage(redis_client(Settings.from_env().redis, 10.0))
    if as_json:
        typer.echo(json.dumps([u.__dict__ for u in usage]))
        return
    for u in usage:
        kept = "-" if u.kept_s is None else f"{u.kept_s // 86400} d"
        typer.echo(f"{u.token}  {u.enrolled:>10,} device(s)  {'REVOKED' if u.revoked else 'active':<8}  record kept "
                   f"{kept}")
    if not usage:
        typer.echo("no enrolment token has enrolled a device")


@devices_app.command("revoke-token")
def revoke_token(token_id: Annotated[str, typer.Argument(metavar="ID", help="the token's id (`ldp devices "
                                                                           "tokens`)")]) -> None:
    """Refuse further enrolments with an enrolment token (its devices keep their credentials: `ldp devices revoke`)."""
    from ldpstream.edge.join import revoke_token as revoke
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings

    require_services(kafka=False)
    try:
        fresh = revoke(redis_client(Settings.from_env().redis, 10.0), token_id)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"token {token_id} {'revoked' if fresh else 'was revoked already'}: further enrolments are refused")


def register(app: typer.Typer) -> None:
    """Add `ldp edge` and `ldp devices`."""
    app.command("edge")(edge)
    app.add_typer(devices_app, name="devices")
