"""`ldp spec validate|publish` and `ldp simulate` through the typer app."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.clock import now_ms
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


@pytest.mark.parametrize(("timestamp_ms", "words"), [(1_700_000_000_000, "refused as stale"),
                                                    (4_000_000_000_000, "refused as from the future")])
def test_simulate_sends_nothing_when_every_report_would_be_refused_for_its_time(timestamp_ms: int, words: str) -> None:
    # no services needed: the time is checked before Kafka is looked for, by the rule the edge and workers apply
    result = runner.invoke(app, ["simulate", "--spec", str(EXAMPLES / "diagnostics.yaml"), "--devices", "44000",
                                 "--timestamp-ms", str(timestamp_ms)],
                           env={"KAFKA_BOOTSTRAP": "127.0.0.1:9", "REDIS_URL": "redis://127.0.0.1:9/0"})
    assert result.exit_code == 1, result.output
    assert "nothing sent" in result.output and words in result.output, result.output


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
    stamp = now_ms() - 60_000  # a minute ago: admitted (an older time is refused before sending)
    published = runner.invoke(app, ["spec", "publish", str(spec_file)])
    assert published.exit_code == 0 and ": published;" in published.output, published.output
    again = runner.invoke(app, ["spec", "publish", str(spec_file)])
    assert "already published with the same content" in again.output
    result = runner.invoke(app, ["simulate", "--spec", str(spec_file), "--devices", "2500", "--seed", "3",
                                 "--batch", "1000", "--truth", str(truth), "--timestamp-ms", str(stamp), "--json"])
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output.strip().splitlines()[-1])
    assert numbers["reports"] == 2500 and numbers["messages"] == 4  # chunks of 2 x 1000: an envelope per partition
    records = read_to_end(live_services.bootstrap, numbers["topic"])
    times = np.concatenate([decode(r.value).timestamps_ms for r in records])  # type: ignore[arg-type]
    assert len(times) == 2500 and (times == stamp).all()
    written = json.loads(truth.read_text())
    assert written["devices"] == 2500
    assert set(written["attributes"]["display_mode"]["frequencies"]) == {"light", "dark", "auto"}
    assert 0 <= written["attributes"]["battery_level"]["mean"] <= 100
