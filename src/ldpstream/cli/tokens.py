"""`ldp tokens create|list|revoke`: the bearer tokens of the HTTP API (`ldpstream.runtime.tokens`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Column, Table

from ldpstream.cli.errors import require_services
from ldpstream.cli.output import console
from ldpstream.runtime.tokens import Scope

if TYPE_CHECKING:
    from ldpstream.runtime.tokens import TokenRecord, TokenStore


tokens_app = typer.Typer(no_args_is_help=True, help="Issue, list and revoke the bearer tokens of the HTTP API.")


def token_store() -> TokenStore:
    """The token store in the project's Redis."""
    from ldpstream.runtime.redis import redis_client
    from ldpstream.runtime.settings import Settings
    from ldpstream.runtime.tokens import TokenStore

    require_services(kafka=False)
    return TokenStore(redis_client(Settings.from_env().redis, 10.0))


def when(ms: int | None) -> str:
    """Epoch milliseconds as UTC date and time to the minute ('never' for None)."""
    return "never" if ms is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def summary(record: TokenRecord, at_ms: int) -> dict[str, Any]:
    """What `list` shows of a token: never its secret, nor the secret's hash."""
    return {"id": record.id, "name": record.name, "scopes": sorted(record.scopes), "created_ms": record.created_ms,
            "expires_ms": record.expires_ms, "revoked_ms": record.revoked_ms, "status": record.status(at_ms)}


@tokens_app.command("create")
def create(scope: Annotated[list[Scope], typer.Option(
               "--scope", help="what the token may do (repeat for several): read = collections and estimates, "
                               "metrics = /metrics, admin = everything")],
           name: Annotated[str, typer.Option(help="who or what the token is for (shown by `list`)")] = "",
           ttl: Annotated[str, typer.Option(help="lifetime: <n>s, <n>m, <n>h, <n>d, or none")] = "90d",
           out: Annotated[Path | None, typer.Option(
               help="write the token to this file (0600, replaced atomically) instead of printing it")] = None,
           ) -> None:
    """Issue a token; it is printed (or written to --out) once and never stored: Redis keeps only its hash."""
    from ldpstream.contract.clock import now_ms
    from ldpstream.runtime.secrets import replace_secret
    from ldpstream.runtime.tokens import parse_ttl

    try:
        ttl_ms = parse_ttl(ttl)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--ttl") from exc
    store = token_store()
    issued = store.issue(scope, name, now_ms(), ttl_ms)
    record = issued.record
    about = f"token {record.id} ({', '.join(sorted(record.scopes))}; expires: {when(record.expires_ms)})"
    if out is None:
        typer.echo(issued.token)
        typer.echo(f"{about}: shown once, keep it secret; revoke with `ldp tokens revoke {record.id}`", err=True)
        return
    try:
        replace_secret(out, issued.token.encode())
    except OSError as exc:
        store.revoke(record.id, now_ms())
        typer.echo(f"error: cannot write {out}: {exc.strerror} (token {record.id} revoked: nobody has it)", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{about} written to {out}")


@tokens_app.command("list")
def list_tokens(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Every token issued: id, name, scopes, expiry, revocation (never secrets or their hashes)."""
    from ldpstream.contract.clock import now_ms

    try:
        records = token_store().records()
    except ValueError as exc:
        typer.echo(f"error: {exc} in Redis", err=True)
        raise typer.Exit(1) from exc
    at = now_ms()
    if as_json:
        typer.echo(json.dumps({"tokens": [summary(r, at) for r in records]}))
        return
    table = Table(Column("id", no_wrap=True), "name", "scopes", "created", "expires", "status")
    for r in records:
        status = f"revoked {when(r.revoked_ms)}" if r.revoked_ms is not None else r.status(at)
        table.add_row(r.id, r.name or "-", ", ".join(sorted(r.scopes)), when(r.created_ms), when(r.expires_ms),
                      status)
    console.print(table)


@tokens_app.command("revoke")
def revoke(token_id: Annotated[str, typer.Argument(metavar="ID", help="the token's id (`ldp tokens list`)")]) -> None:
    """Revoke a token for good: the API refuses it within seconds (it caches a token's record briefly)."""
    from ldpstream.contract.clock import now_ms

    try:
        record = token_store().revoke(token_id, now_ms())
    except ValueError as exc:
        typer.echo(f"error: {exc} in Redis", err=True)
        raise typer.Exit(1) from exc
    if record is None:
        typer.echo(f"error: no token {token_id[:40]!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"token {record.id} ({record.name or 'no name'}) revoked at {when(record.revoked_ms)}")


def register(app: typer.Typer) -> None:
    """Add `ldp tokens`."""
    app.add_typer(tokens_app, name="tokens")
