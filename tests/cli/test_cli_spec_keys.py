"""`ldp up` makes the spec-signing keys; `ldp spec keys init|list|rotate|retire` through the typer app."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.spec import load_spec
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.signing import key_id, load_signing_key, load_trusted_keys
from ldpstream.runtime.specs import read_specs
from tests.specs import MIXED

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_up_makes_the_signing_key_pair_once(live_services: Settings, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path))  # the running services, as external ones: nothing started
    monkeypatch.setenv("KAFKA_BOOTSTRAP", live_services.bootstrap)
    monkeypatch.setenv("REDIS_URL", live_services.redis)
    private, public = tmp_path / "secrets" / "spec-signing.key", tmp_path / "secrets" / "spec-signing.pub"
    monkeypatch.setenv("LDP_SPEC_SIGNING_KEY", str(private))  # (their credentials stay in LDP_SECRETS_DIR)
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(public))
    result = runner.invoke(app, ["up"])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(private.stat().st_mode) == stat.S_IMODE(public.stat().st_mode) == 0o600
    signer = key_id(load_signing_key(private).public_key())
    assert list(load_trusted_keys(public)) == [signer] and "made now" in result.output
    again = runner.invoke(app, ["up"])
    assert again.exit_code == 0 and "(kept)" in again.output
    assert key_id(load_signing_key(private).public_key()) == signer


def test_keys_rotate_then_retire_keep_the_published_spec(live_services: Settings, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, topics: list[str]) -> None:
    topic = f"ldp.test.specs-{uuid.uuid4().hex[:10]}"
    topics.append(topic)
    monkeypatch.setenv("LDP_SPECS_TOPIC", topic)
    monkeypatch.setenv("LDP_SPEC_SIGNING_KEY", str(tmp_path / "admin" / "spec.key"))
    monkeypatch.setenv("LDP_SPEC_TRUSTED_KEYS", str(tmp_path / "trusted.pub"))
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(MIXED.format(name=f"test-keys-{uuid.uuid4().hex[:10]}", epsilon=2.0, sampling="auto"))
    spec = load_spec(spec_file)
    topics.append(spec.topic)
    refused = runner.invoke(app, ["spec", "publish", str(spec_file)])
    assert refused.exit_code == 1 and "not published" in refused.output and "ldp up" in refused.output

    assert runner.invoke(app, ["spec", "keys", "init"]).exit_code == 0
    assert runner.invoke(app, ["spec", "publish", str(spec_file)]).exit_code == 0
    first = key_id(load_signing_key(tmp_path / "admin" / "spec.key").public_key()).hex()
    assert runner.invoke(app, ["spec", "keys", "list"]).output.split() == [first, "(signing", "key)"]

    rotated = runner.invoke(app, ["spec", "keys", "rotate"])
    assert rotated.exit_code == 0 and "re-signed 1 published spec(s)" in rotated.output, rotated.output
    second = key_id(load_signing_key(tmp_path / "admin" / "spec.key").public_key()).hex()
    assert runner.invoke(app, ["spec", "keys", "list"]).output.split() == [first, second, "(signing", "key)"]
    retired = runner.invoke(app, ["spec", "keys", "retire"])
    assert retired.exit_code == 0 and f"no longer trusted: {first}" in retired.output, retired.output
    assert runner.invoke(app, ["spec", "keys", "list"]).output.split() == [second, "(signing", "key)"]
    assert spec.key in read_specs(live_services.bootstrap)
