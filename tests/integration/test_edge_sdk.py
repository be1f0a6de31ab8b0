"""The device SDK over HTTP: the outbox survives an app restart and is sent to the edge; the budget is charged
when a report is made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from edge_support import EdgeProcess
from pipeline_support import Collection, topic_messages
from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.contract.clock import now_ms
from ldpstream.contract.wire import decode
from ldpstream.device.ledger import BudgetExceeded, PrivacyLedger
from ldpstream.device.outbox import HttpTransport, Outbox
from ldpstream.device.sdk import Device
from ldpstream.edge.devices import DeviceRegistry

pytestmark = pytest.mark.integration
HOUR_MS = 3600 * 1000
RECORD = {"battery_level": 57.5, "battery_temperature": 31.0, "memory_used": 2048, "screen_on_minutes": 300.0,
          "apps_running": 40, "brightness_level": "low", "location_enabled": "on", "display_mode": "dark",
          "network_type": "5g", "os_version": "14"}


def test_the_outbox_survives_a_restart_and_reaches_the_edge(collection: Collection, edge: EdgeProcess,
                                                            enrolled: DeviceRegistry, tmp_path: Path) -> None:
    credential = enrolled.enroll(collection.spec.name, 1)[0]
    now = now_ms()
    ledger = PrivacyLedger.open(tmp_path / "ledger.json")

    def device() -> Device:
        return Device(collection.spec, credential.device, ledger=ledger,
                      transport=HttpTransport(edge.url, credential, Outbox(tmp_path / "outbox")))

    app = device()
    app.report(RECORD, now // HOUR_MS * HOUR_MS - 1)  # the previous hour
    app.report(RECORD, now)
    with pytest.raises(BudgetExceeded):  # charged when made, though nothing was sent yet
        app.report(RECORD, now)
    stored = b"".join(p.read_bytes() for p in (tmp_path / "outbox").glob("*.report"))
    assert b"dark" not in stored and len(Outbox(tmp_path / "outbox")) == 2  # mechanism output only
    restarted = device()  # the app starts again: the outbox is still there
    assert restarted.flush() == 2 and len(Outbox(tmp_path / "outbox")) == 0
    messages = topic_messages(collection.cfg.bootstrap, collection.spec.topic)
    assert sum(len(decode(m.value)) for msgs in messages.values() for m in msgs) == 2


def test_enroll_simulate_via_the_edge_and_revoke_from_the_command_line(collection: Collection, edge: EdgeProcess,
                                                                       enrolled: DeviceRegistry,
                                                                       tmp_path: Path) -> None:
    runner = CliRunner()
    name = collection.spec.name
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(collection.spec.canonical_json())
    enroll = runner.invoke(app, ["devices", "enroll", "--collection", name, "--count", "50",
                                 "--out", str(tmp_path / "creds.json")])
    assert enroll.exit_code == 0, enroll.output
    run = runner.invoke(app, ["simulate", "--spec", str(spec_file), "--devices", "50", "--via", edge.url,
                              "--credentials", str(tmp_path / "creds.json"), "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output.strip().splitlines()[-1])["statuses"] == {"200": 50}
    device = json.loads((tmp_path / "creds.json").read_text())[0]["device"]
    revoke = runner.invoke(app, ["devices", "revoke", "--collection", name, device, "unknown-device"])
    assert revoke.exit_code == 1 and "1 of 2" in revoke.output
