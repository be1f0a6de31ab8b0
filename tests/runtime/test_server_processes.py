"""A server process started before `ldp up` has made the credentials says so in one line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ldpstream.runtime.supervisor import EXIT_UNUSABLE


@pytest.mark.parametrize(("module", "principal"), [("ldpstream.edge", "edge"), ("ldpstream.aggregator", "aggregator")])
def test_missing_credentials_are_one_line_that_says_to_run_ldp_up(module: str, principal: str, tmp_path: Path) -> None:
    env = {**os.environ, "LDP_STATE_DIR": str(tmp_path / "state"), "LDP_SECRETS_DIR": str(tmp_path / "secrets")}
    done = subprocess.run([sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_UNUSABLE and len(lines) == 1, done.stderr  # never restarted by a supervisor
    assert lines[0].startswith(f"{module}: no ") and f"credentials for {principal!r}" in lines[0]
    assert "run `ldp up`" in lines[0]
