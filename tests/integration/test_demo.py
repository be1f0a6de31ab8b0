"""`ldp demo`, the main job, end to end (smaller fleets than the default)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from pipeline_support import assert_within_stderr

from ldpstream.aggregator.store import RedisStore
from ldpstream.contract.topics import report_topic
from ldpstream.edge.devices import edge_keys
from ldpstream.runtime.kafka import delete_topic
from ldpstream.runtime.redis import redis_client
from ldpstream.runtime.settings import PROJECT_ROOT, Settings

pytestmark = pytest.mark.integration

# Every stage runs as in the default demo (enrolment, the edge, Kafka, a worker, the HTTP API, LDP SGD over Kafka),
# on fewer devices: the estimates are checked against their own standard errors, computed for this n.
DEVICES, TRAIN_DEVICES = 5_000, 30_000


def test_ldp_demo_runs_end_to_end(live_services: Settings) -> None:
    out = subprocess.run([sys.executable, "-m", "ldpstream", "demo", "--devices", str(DEVICES), "--train-devices",
                          str(TRAIN_DEVICES), "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    name = result["estimates"]["collection"]
    try:
        assert result["estimates"]["reports"] == DEVICES
        assert_within_stderr(result["estimates"], result["truth"])
        training = result["training"]
        assert training["metric"] == "misclassification" and training["private"] < training["non_private"] + 0.1
        run_the_readme_s_analyst_commands(name)
    finally:  # the demo keeps its collection for a user to look at; the later tests' workers need not read it
        remove_collection(live_services, name)


def readme_commands() -> list[str]:
    """The README's analyst commands (the shell block under "Series, the console and the Python client"), but the
    server they end with."""
    text = (PROJECT_ROOT / "README.md").read_text()
    block = re.search(r"## Series, the console and the Python client\n+```\n(.*?)```", text, re.S)
    assert block is not None, "the README's analyst block moved"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("ldp serve")]


def run_the_readme_s_analyst_commands(name: str) -> None:
    """As written, after the demo: they name its collection and print its windows."""
    script = "set -euo pipefail\n" + "\n".join(readme_commands()) + "\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env,
                         cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert name in out.stdout and "battery_level" in out.stdout, out.stdout[-2000:]
    assert "wifi" in out.stdout  # the CSV of network_type's windows


def remove_collection(cfg: Settings, name: str) -> None:
    """A collection's report topic, statistics and edge keys (its published spec stays: specs are never
    withdrawn)."""
    with suppress(Exception):
        delete_topic(cfg.bootstrap, report_topic(name))
    RedisStore(cfg.redis).delete_collection(name)
    client = redis_client(cfg.redis)
    keys = list(client.scan_iter(edge_keys(name), count=10_000))
    for lo in range(0, len(keys), 10_000):
        client.delete(*keys[lo:lo + 10_000])
