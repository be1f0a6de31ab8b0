"""Aggregator worker processes: start them, supervise them (a worker that exits is started again, and an abnormal
exit is recorded for the health check, `ldpstream.aggregator.health`), stop them cleanly (SIGTERM: the batch in hand is
applied whole or not at all, since each batch is one atomic Redis script). Beside them, the poisoning auditor
(`ldpstream.aggregator.auditor`), supervised the same way."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from ldpstream.aggregator.health import WorkerRegistry, worker_id
from ldpstream.contract.clock import now_ms
from ldpstream.runtime.process import stop_pid

log = logging.getLogger(__name__)


def start_worker(group: str = "ldp-aggregator", metrics_port: int | None = None, log_file: Path | None = None,
                 max_messages: int | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One `python -m ldpstream.aggregator` worker in its own process group."""
    argv = [sys.executable, "-m", "ldpstream.aggregator", "--group", group]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if max_messages is not None:
        argv += ["--max-messages", str(max_messages)]
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
    try:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if log_file else None,
                                start_new_session=True, env={**os.environ, **(env or {})})
    finally:
        if log_file:
            out.close()  # type: ignore[union-attr]


def start_auditor() -> subprocess.Popen[bytes]:
    """One `python -m ldpstream.aggregator.auditor` in its own process group."""
    return subprocess.Popen([sys.executable, "-m", "ldpstream.aggregator.auditor"], start_new_session=True)


def stop_worker(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """SIGTERM the worker's process group and wait (SIGKILL if it hangs)."""
    if proc.poll() is None:
        stop_pid(proc.pid, timeout_s=timeout_s)
    proc.wait(timeout=5)


class WorkerPool:
    """N workers in one consumer group, and with `audit` the poisoning auditor; one that dies is restarted;
    SIGTERM/SIGINT stop them all cleanly."""

    def __init__(self, workers: int, group: str, metrics_port: int | None = None,
                 registry: WorkerRegistry | None = None, audit: bool = False) -> None:
        self.size, self.group, self.metrics_port, self.audit = workers, group, metrics_port, audit
        self.registry = registry
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping = False

    def _start(self, i: int) -> subprocess.Popen[bytes]:
        if i == self.size:  # the last process: the auditor
            return start_auditor()
        port = None if self.metrics_port is None else self.metrics_port + i
        return start_worker(self.group, metrics_port=port)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; return the exit status."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.procs = [self._start(i) for i in range(self.size + self.audit)]
        log.warning("started %d aggregator worker(s) in group %s: pids %s", self.size, self.group,
                    [p.pid for p in self.procs])
        while not self._stopping:
            for i, proc in enumerate(self.procs):
                if proc.poll() is not None and not self._stopping:
                    log.error("worker %d (pid %d) exited with %s; restarting", i, proc.pid, proc.returncode)
                    self._record_exit(proc)
                    time.sleep(1.0)
                    self.procs[i] = self._start(i)
            time.sleep(0.2)
        for proc in self.procs:
            stop_worker(proc)
        return 0

    def _record_exit(self, proc: subprocess.Popen[bytes]) -> None:
        """An abnormal exit goes to the health registry (a clean one, status 0, is a re-exec or a stop)."""
        if self.registry is None or proc.returncode == 0:
            return
        try:
            self.registry.record_crash(worker_id(proc.pid), self.group, int(proc.returncode), now_ms())
        except redis.RedisError as exc:
            log.warning("exit of pid %d not recorded: %s", proc.pid, exc)

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.warning("signal %d: stopping %d worker(s)", signum, len(self.procs))
        self._stopping = True
