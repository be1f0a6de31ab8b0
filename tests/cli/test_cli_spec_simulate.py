"""`ldp spec validate|publish` and `ldp simulate` through the typer app."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.wire import decode
from ldpstream.runtime.kafka import read_to_end
from ldpstream.runtime.settings import Settings
from tests.specs import MIXED

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_validate_prints_ok_with_k_and_resolved_mechanisms() -> None:
    result = runner.invoke(app, ["spec", "validate", str(EXAMPLES / "diagnostics.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("OK ")
    assert "k = 1 of 10 attributes" in result.output
    assert "(auto)" in result.output and "grr" in result.output


def test_validate_refuses_a_bad_spec_with_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MIXED.format(name="x", epsilon=-1, sampling="auto"))
    result = runner.invoke(app, ["spec", "validate", str(bad)])
    assert result.exit_code == 1
    assert "invalid spec" in result.output and "epsilon" in result.output


@pytest.mark.integration
def test_publish_then_simulate_with_truth(live_services: Settings, tmp_path: Path) -> None:
    spec_file, truth = tmp_path / "spec.yaml", tmp_path / "truth.json"
    spec_file.write_text(MIXED.format(name=f"test-cli-{uuid.uuid4().hex[:10]}", epsilon=2.0, sampling="auto"))
    published = runner.invoke(app, ["spec", "publish", str(spec_file)])
    assert published.exit_code == 0 and ": published;" in published.output, published.output
    again = runner.invoke(app, ["spec", "publish", str(spec_file)])
    assert "already published with the same content" in again.output
    result = runner.invoke(app, ["simulate", "--spec", str(spec_file), "--devices", "2500", "--seed", "3",
                                 "--batch", "1000", "--truth", str(truth), "--timestamp-ms", "1700000000000",
                                 "--json"])
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output.strip().splitlines()[-1])
    assert numbers["reports"] == 2500 and numbers["messages"] == 4  # chunks of 2 x 1000: an envelope per partition
    records = read_to_end(live_services.bootstrap, numbers["topic"])
    times = np.concatenate([decode(r.value).timestamps_ms for r in records])  # type: ignore[arg-type]
    assert len(times) == 2500 and (times == 1_700_000_000_000).all()
    written = json.loads(truth.read_text())
    assert written["devices"] == 2500
    assert set(written["attributes"]["display_mode"]["frequencies"]) == {"light", "dark", "auto"}
    assert 0 <= written["attributes"]["battery_level"]["mean"] <= 100
