"""Scrape targets announced for `ldp up --prometheus` (`ldpstream.runtime.targets`): one file-discovery file per
process, withdrawn at exit, a killed process's pruned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ldpstream.runtime.catalog import OPEN, TOKEN, Metrics, Principal, Service, service
from ldpstream.runtime.settings import Settings
from ldpstream.runtime.targets import PID_LABEL, announce, announced, prune, targets_dir


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    return Settings.from_env({"LDP_STATE_DIR": str(tmp_path), "LDP_METRICS_ADDR": "0.0.0.0"})


def test_an_announcement_is_prometheus_file_discovery_with_its_job(cfg: Settings) -> None:
    path = announce(cfg, service("edge"), 8080, host="127.0.0.1")
    assert path is not None and path.parent == targets_dir(cfg, TOKEN)
    [entry] = json.loads(path.read_text())
    assert entry["targets"] == ["127.0.0.1:8080"]
    assert entry["labels"]["job"] == "ldp-edge" and PID_LABEL.startswith("__")  # dropped after discovery
    announce(cfg, service("aggregator"), 9101)  # every interface: scraped on loopback
    assert announced(cfg) == {"ldp-aggregator": ["127.0.0.1:9101"], "ldp-edge": ["127.0.0.1:8080"]}
    odd = Service("x", Principal("x"), "a service with metrics read in no known way", "x",
                  metrics=Metrics("ldp-x", 1, access="basic"))
    with pytest.raises(ValueError, match="access"):
        announce(cfg, odd, 1)
    with pytest.raises(ValueError, match="no metrics"):
        announce(cfg, service("auditor"), 1)


def test_a_process_withdraws_at_exit_and_a_killed_ones_is_pruned(cfg: Settings, tmp_path: Path) -> None:
    code = ("import os, sys; from ldpstream.runtime.settings import Settings; from ldpstream.runtime.targets import "
            "announce; from ldpstream.runtime.catalog import service; "
            "p = announce(Settings.from_env(), service('shuffler'), 9300); print(p, flush=True); "
            "os._exit(0) if sys.argv[1] == 'kill' else None")
    env = {"LDP_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    clean = subprocess.run([sys.executable, "-c", code, "exit"], capture_output=True, text=True, env=env, check=True)
    assert not Path(clean.stdout.strip()).exists()
    killed = subprocess.run([sys.executable, "-c", code, "kill"], capture_output=True, text=True, env=env, check=True)
    left = Path(killed.stdout.strip())
    assert left.exists() and left.parent.name == OPEN  # os._exit skips atexit, as a SIGKILL would
    assert prune(cfg) == [left] and not left.exists()


def test_a_state_dir_that_cannot_be_written_leaves_the_service_unannounced(tmp_path: Path) -> None:
    (tmp_path / "prometheus").write_text("a file where the directory would be")
    assert announce(Settings.from_env({"LDP_STATE_DIR": str(tmp_path)}), service("api"), 8000) is None
