"""`ldp status`: the services, then the pipeline's health; the exit status follows both."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.runtime.catalog import SERVICES
from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration


def test_status_judges_the_services_and_the_pipeline(live_services: Settings) -> None:
    result = CliRunner().invoke(app, ["status", "--json"])
    report = json.loads(result.stdout)
    assert [s["name"] for s in report["services"]] == ["kafka", "redis"] and all(s["answers"]
                                                                                for s in report["services"])
    assert set(report["processes"]) == {svc.name for svc in SERVICES if svc.metrics is not None}  # the catalog's
    pipeline = report["pipeline"]
    assert set(pipeline) == {"ok", "reasons", "workers", "collections"}
    assert pipeline["ok"] == (not pipeline["reasons"]) and result.exit_code == (0 if pipeline["ok"] else 1)
    waiting = {c["collection"]: c["waiting"] for c in pipeline["collections"]}
    stalled = [r for r in pipeline["reasons"] if r.startswith("collection ")]
    assert all(waiting[r.split()[1].rstrip(":")] > 0 for r in stalled)


def test_services_only_leaves_the_pipeline_out(live_services: Settings) -> None:
    result = CliRunner().invoke(app, ["status", "--json", "--services-only"])
    assert result.exit_code == 0 and json.loads(result.stdout)["pipeline"] is None
