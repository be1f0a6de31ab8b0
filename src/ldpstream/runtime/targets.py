"""Scrape targets announced by the local processes that serve Prometheus metrics, for `ldp up --prometheus`.

A process that serves /metrics writes one file in Prometheus' file-based discovery format under
`<state dir>/prometheus/targets/<access>/` (`open`: no credentials, `token`: a bearer token of scope `metrics`, as
the edge and the read API ask) and removes it when it exits; Prometheus reads the directory and notices a file that
comes or goes within seconds. Each file names its `job` (the service's, `ldpstream.runtime.catalog`: `ldp-edge`,
`ldp-aggregator`, `ldp-api`, `ldp-shuffler`, `ldp-sgd`, ...) and the process's pid (`__meta_ldp_pid`: a label
Prometheus drops after discovery), so the file of a process that was killed is recognised and pruned (`prune`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
from pathlib import Path

from ldpstream.contract.files import write_atomically
from ldpstream.runtime.catalog import OPEN, TOKEN, Service
from ldpstream.runtime.process import pid_alive
from ldpstream.runtime.settings import Settings

log = logging.getLogger(__name__)
PID_LABEL = "__meta_ldp_pid"


def targets_dir(cfg: Settings, access: str | None = None) -> Path:
    """Where the targets are announced (of one access kind, or all)."""
    root = cfg.state_dir / "prometheus" / "targets"
    return root if access is None else root / access


def announce(cfg: Settings, service: Service, port: int, host: str | None = None) -> Path | None:
    """Announce this process's /metrics at `host`:`port` (default: `cfg.metrics_addr`, or loopback where that is
    every interface) under the service's job until it exits; the file written (None, logged, where the state dir
    cannot be written: the service runs on, unannounced)."""
    if service.metrics is None:
        raise ValueError(f"the service {service.name} declares no metrics")
    job, access = service.metrics.job, service.metrics.access
    if access not in (OPEN, TOKEN):
        raise ValueError(f"access is {OPEN} or {TOKEN}, not {access!r}")
    address = host or cfg.metrics_addr
    if address in ("0.0.0.0", "", "::"):
        address = "127.0.0.1"
    directory = targets_dir(cfg, access)
    path = directory / f"{job}-{port}.json"
    entry = [{"targets": [f"{address}:{port}"], "labels": {"job": job, PID_LABEL: str(os.getpid())}}]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        prune(cfg)
        write_atomically(path, json.dumps(entry).encode(), 0o644)  # Prometheus never reads a half-written file
    except OSError as exc:
        log.warning("metrics on port %d not announced to a local Prometheus: %s", port, exc)
        return None
    pid = os.getpid()
    atexit.register(lambda: _withdraw(path, pid))
    return path


def _withdraw(path: Path, pid: int) -> None:
    """Remove the file if it is still ours (a later process on the same port may have replaced it)."""
    if os.getpid() == pid and _pid_of(path) == pid:
        path.unlink(missing_ok=True)


def _pid_of(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())[0]["labels"][PID_LABEL])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def prune(cfg: Settings) -> list[Path]:
    """Remove the announcements of processes that are gone (killed before they could); those removed."""
    gone = []
    for path in sorted(targets_dir(cfg).glob("*/*.json")):
        pid = _pid_of(path)
        if pid is None or not pid_alive(pid):
            path.unlink(missing_ok=True)
            gone.append(path)
    return gone


def announced(cfg: Settings) -> dict[str, list[str]]:
    """The live targets by job (`ldp status`)."""
    prune(cfg)
    out: dict[str, list[str]] = {}
    for path in sorted(targets_dir(cfg).glob("*/*.json")):
        try:
            entry = json.loads(path.read_text())[0]
            out.setdefault(entry["labels"]["job"], []).extend(entry["targets"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return out
