"""`ldp tokens create|list|revoke` through typer's CliRunner, against the real Redis; and `ldp serve`'s hint."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.cli.serve import NO_TOKEN_HINT, token_hint
from ldpstream.runtime.redis import async_redis_client, redis_client
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.tokens import REVOKED, TOKENS_KEY, TokenError, TokenRecord, TokenVerifier, parse_bearer

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture
def created(live_services: Settings) -> Iterator[list[str]]:
    """Ids of the tokens a test creates; their records are deleted afterwards."""
    ids: list[str] = []
    yield ids
    if ids:
        redis_client(live_services.redis).hdel(TOKENS_KEY, *ids)


def ldp(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["tokens", *args])
    return result.exit_code, result.stdout, result.stderr


def verify(cfg: Settings, token: str) -> TokenRecord | str:
    """What a fresh API verifier says of a token: its record, or why it refuses it."""
    async def run() -> TokenRecord | str:
        verifier = TokenVerifier(async_redis_client(cfg.redis, 5.0))
        try:
            return await verifier.verify(f"Bearer {token}")
        except TokenError as exc:
            return str(exc)
        finally:
            await verifier.close()
    return asyncio.run(run())


def listed(token_id: str) -> dict[str, object]:
    code, out, _ = ldp("list", "--json")
    assert code == 0
    return {t["id"]: t for t in json.loads(out)["tokens"]}[token_id]


def test_create_list_revoke_round_trip(live_services: Settings, created: list[str]) -> None:
    code, out, err = ldp("create", "--scope", "read", "--scope", "metrics", "--name", "grafana", "--ttl", "30d")
    assert code == 0, err
    token = out.strip()  # stdout is the token alone: `TOKEN=$(ldp tokens create ...)` works
    parsed = parse_bearer(f"Bearer {token}")
    assert parsed is not None
    token_id, secret = parsed
    created.append(token_id)
    assert f"token {token_id} (metrics, read; expires: " in err and "shown once" in err

    record = verify(live_services, token)
    assert isinstance(record, TokenRecord) and record.name == "grafana"
    assert record.expires_ms == record.created_ms + 30 * 86_400_000

    entry = listed(token_id)
    assert entry == {"id": token_id, "name": "grafana", "scopes": ["metrics", "read"], "status": "active",
                     "created_ms": record.created_ms, "expires_ms": record.expires_ms, "revoked_ms": None}
    code, table, _ = ldp("list")
    assert code == 0 and token_id in table and "grafana" in table
    for out_ in (json.dumps(entry), table):
        assert secret not in out_ and record.sha256 not in out_

    code, out, _ = ldp("revoke", token_id)
    assert code == 0 and out.startswith(f"token {token_id} (grafana) revoked at ")
    revoked = listed(token_id)
    assert revoked["status"] == "revoked" and isinstance(revoked["revoked_ms"], int)
    assert verify(live_services, token) == REVOKED
    assert ldp("revoke", token_id)[0] == 0  # again: still revoked, at the first time
    assert listed(token_id) == revoked


def test_create_out_writes_a_0600_file_and_prints_no_secret(live_services: Settings, created: list[str],
                                                            tmp_path: Path) -> None:
    out_file = tmp_path / "secrets" / "api_metrics_token"
    code, out, err = ldp("create", "--scope", "metrics", "--name", "prometheus", "--ttl", "none", "--out",
                         str(out_file))
    assert code == 0, err
    token = out_file.read_text()
    parsed = parse_bearer(f"Bearer {token}")
    assert parsed is not None
    created.append(parsed[0])
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    assert token not in out + err and f"written to {out_file}" in out
    record = verify(live_services, token)
    assert isinstance(record, TokenRecord) and record.expires_ms is None and record.name == "prometheus"


@pytest.mark.parametrize("args, message", [
    (["--scope", "root"], "'root' is not one of"),
    ([], "Missing option '--scope'"),
    (["--scope", "read", "--ttl", "0d"], "a lifetime is"),
    (["--scope", "read", "--ttl", "forever"], "a lifetime is"),
])
def test_create_refuses_bad_options_with_exit_2_and_issues_nothing(live_services: Settings, args: list[str],
                                                                   message: str) -> None:
    before = redis_client(live_services.redis).hlen(TOKENS_KEY)
    result = runner.invoke(app, ["tokens", "create", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()).replace("│", "")
    assert redis_client(live_services.redis).hlen(TOKENS_KEY) == before


@pytest.mark.parametrize("token_id", ["000000000000", "nope", "ldp_x"])
def test_revoking_an_unknown_token_exits_1(live_services: Settings, token_id: str) -> None:
    code, _, err = ldp("revoke", token_id)
    assert code == 1 and f"no token {token_id!r}" in err


def test_serve_hints_how_to_get_a_token_only_when_none_is_active(live_services: Settings) -> None:
    cfg = Settings(live_services.state_dir, live_services.deploy_dir,
                   redis_url=live_services.redis.rpartition("/")[0] + "/15")  # a database of its own: empty
    client = redis_client(cfg.redis)
    client.delete(TOKENS_KEY)
    try:
        assert token_hint(cfg) == NO_TOKEN_HINT
        token_id = "0" * 12
        client.hset(TOKENS_KEY, token_id, TokenRecord(token_id, "a" * 64, frozenset(), "", 1, 2).to_json())
        assert token_hint(cfg) == NO_TOKEN_HINT  # an expired token is no token
        client.hset(TOKENS_KEY, token_id, TokenRecord(token_id, "a" * 64, frozenset(), "", 1).to_json())
        assert token_hint(cfg) is None
    finally:
        client.delete(TOKENS_KEY)
    assert token_hint(Settings(cfg.state_dir, cfg.deploy_dir, redis_url="redis://127.0.0.1:1/0")) is None
