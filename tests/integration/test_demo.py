"""`ldp demo`, the main job, end to end (smaller fleets than the default)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pipeline_support import assert_within_stderr

from ldpstream.runtime.settings import Settings

pytestmark = pytest.mark.integration


def test_ldp_demo_runs_end_to_end(live_services: Settings) -> None:
    out = subprocess.run([sys.executable, "-m", "ldpstream", "demo", "--devices", "30000", "--train-devices",
                          "30000", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["estimates"]["reports"] == 30_000
    assert_within_stderr(result["estimates"], result["truth"])
    training = result["training"]
    assert training["metric"] == "misclassification" and training["private"] < training["non_private"] + 0.1
