"""`ldp serve`: the HTTP API (collections, estimates, series, Prometheus metrics, health) and the web console in the
foreground."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ldpstream.cli.errors import CliError, client_logs, require_services

if TYPE_CHECKING:
    from ldpstream.runtime.settings import Settings


NO_TOKEN_HINT = ("no active API token: every request but /healthz is answered 401 until an admin issues one, e.g. "
                 "`ldp tokens create --scope read --name dashboards` (and `--scope metrics --out FILE` for "
                 "Prometheus)")


def token_hint(cfg: Settings) -> str | None:
    """How to get a token when none is active; None when one is, or when Redis cannot tell (reads only)."""
    from redis import RedisError

    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.tokens import TokenStore

    try:
        records = TokenStore(redis_client(cfg.redis, 2.0)).records()
    except (RedisError, ValueError):
        return None
    return None if any(r.status(now_ms()) == "active" for r in records) else NO_TOKEN_HINT


def serve(host: str = typer.Option("127.0.0.1", help="address to listen on (0.0.0.0: every interface)"),
          port: int = typer.Option(8000, min=1, max=65535, help="TCP port")) -> None:
    """Serve the read API (/collections, /collections/NAME/estimates and /series with a bearer token of scope read,
    /metrics with scope metrics, /openapi.json), its web console at /console/ and /healthz until SIGINT or SIGTERM.

    Tokens: `ldp tokens create`. The console asks for a read token, or takes it from the address:
    http://HOST:PORT/console/#token=TOKEN (a fragment never leaves the browser)."""
    from ldpstream.readapi.api import serve as serve_api
    from ldpstream.runtime.access import act_as
    from ldpstream.runtime.catalog import service
    from ldpstream.runtime.process import port_in_use
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.supervisor import die_with_parent
    from ldpstream.runtime.targets import announce

    die_with_parent()  # when a supervisor started it (`ldpstream.runtime.supervisor.start`)
    act_as(service("api").principal.name)
    if port_in_use(port, host if host not in ("0.0.0.0", "::") else "127.0.0.1"):
        raise CliError(f"cannot listen on {host}:{port}: the port is in use by another process (stop it, or pass "
                       f"--port)")
    require_services()
    client_logs(verbose=True)  # a service in the foreground: its clients' warnings are its log
    cfg = Settings.from_env()
    hint = token_hint(cfg)
    if hint is not None:
        typer.echo(hint, err=True)
    typer.echo(f"console: http://{host}:{port}/console/ (with a read token: ldp tokens create --scope read)")

    def started(line: str) -> None:  # listening: announced to the local Prometheus (`ldp up --prometheus`)
        typer.echo(line)
        announce(cfg, service("api"), port, host=host)

    try:
        serve_api(cfg, host, port, on_start=started)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}", err=True)
        raise typer.Exit(1) from exc


def register(app: typer.Typer) -> None:
    """Add `ldp serve` to the app."""
    app.command("serve")(serve)
