"""Aggregator worker processes: start them, supervise them (`ldpstream.runtime.supervisor`: a worker that exits is
started again, and an abnormal exit is recorded for the health check, `ldpstream.aggregator.health`; a worker dies
with its supervisor), stop them cleanly (SIGTERM: the batch in hand is applied whole or not at all, since each batch
is one atomic Redis script). Beside them, the poisoning auditor (`ldpstream.aggregator.auditor`), supervised the same
way."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import redis

from ldpstream.aggregator.health import WorkerRegistry, worker_id
from ldpstream.contract.clock import now_ms
from ldpstream.runtime.catalog import AGGREGATOR_GROUPS, service
from ldpstream.runtime.supervisor import Supervisor, start, stop

log = logging.getLogger(__name__)


def start_worker(group: str = AGGREGATOR_GROUPS, metrics_port: int | None = None, log_file: Path | None = None,
                 max_messages: int | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One aggregator worker (the catalog's `aggregator`) in its own process group, dying with this process."""
    args = ["--group", group]
    if metrics_port is not None:
        args += ["--metrics-port", str(metrics_port)]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    return start(service("aggregator"), *args, log_file=log_file, env=env, stdout=subprocess.DEVNULL)


def start_auditor() -> subprocess.Popen[bytes]:
    """The poisoning auditor (the catalog's `auditor`) in its own process group, dying with this process."""
    return start(service("auditor"))


def stop_worker(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """SIGTERM the worker's process group and wait (SIGKILL if it hangs)."""
    stop(proc, timeout_s)


class WorkerPool:
    """N workers in one consumer group, and with `audit` the poisoning auditor, supervised; SIGTERM/SIGINT stop them
    all cleanly."""

    def __init__(self, workers: int, group: str, metrics_port: int | None = None,
                 registry: WorkerRegistry | None = None, audit: bool = False) -> None:
        self.size, self.group, self.metrics_port, self.audit = workers, group, metrics_port, audit
        self.registry = registry

    def _start(self, i: int) -> subprocess.Popen[bytes]:
        if i == self.size:  # the last process: the auditor
            return start_auditor()
        port = None if self.metrics_port is None else self.metrics_port + i
        return start_worker(self.group, metrics_port=port)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (0), or until a worker cannot run (1)."""
        supervisor = Supervisor(f"ldp aggregate ({self.group})", self.size + self.audit, self._start,
                                self._record_exit)
        return supervisor.run()

    def _record_exit(self, _i: int, proc: subprocess.Popen[bytes]) -> None:
        """An abnormal exit goes to the health registry (a clean one, status 0, is a re-exec or a stop)."""
        if self.registry is None or proc.returncode == 0:
            return
        try:
            self.registry.record_crash(worker_id(proc.pid), self.group, int(proc.returncode), now_ms())
        except redis.RedisError as exc:
            log.warning("exit of pid %d not recorded: %s", proc.pid, exc)
