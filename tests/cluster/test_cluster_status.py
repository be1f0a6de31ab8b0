"""`ldp up` and `ldp status` on a state dir that holds a cluster: idempotent, every node shown with its role."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.cluster

runner = CliRunner()


def test_up_again_starts_nothing_and_status_shows_every_node(cluster: Settings) -> None:
    again = runner.invoke(app, ["up"])
    assert again.exit_code == 0, again.output
    assert "0 of 3 node(s) started" in again.output and "0 of 6 node(s) started" in again.output
    shown = runner.invoke(app, ["status", "--json", "--services-only"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.output)["services"]
    assert [r["address"] for r in rows if r["name"] == "kafka"] == [f"127.0.0.1:{p}" for p in cluster.kafka_ports]
    redis_rows = [r for r in rows if r["name"] == "redis"]
    assert len(redis_rows) == 6 and all(r["answers"] and r["pid"] for r in rows)
    roles = [r["detail"].split(": ", 1)[1] for r in redis_rows]
    assert sum(role.startswith("primary, slots") for role in roles) == 3
    assert sum(role.startswith("replica of 127.0.0.1:") for role in roles) == 3
