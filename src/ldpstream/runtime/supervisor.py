"""One launcher and supervisor for a service's child processes (`ldp aggregate`'s workers and auditor, `ldp edge`'s
processes, the demo's worker, shuffler and read API): `start` runs a service of the catalog
(`ldpstream.runtime.catalog`) as its descriptor says, `Supervisor` keeps N of them running. (The local Kafka, Redis
and Prometheus are daemons that outlive the CLI: `ldpstream.runtime.process.spawn`.)

The contract between the two sides:
- `launch` starts a child in its own process group, with `SUPERVISOR_ENV` naming this process; the child calls
  `die_with_parent` first, so it never outlives its supervisor, even one that was SIGKILLed: the kernel sends it
  SIGTERM when the supervisor dies (PR_SET_PDEATHSIG, Linux, for a child started by the supervisor's main thread),
  and a thread that watches its parent does the same where that is missing or was raced (the supervisor died before
  the child asked). An orphan then has `STOP_GRACE_S` to stop cleanly before it exits regardless.
- A child that cannot run as configured (its port taken, its credentials or keys missing) prints one line and exits
  with `EXIT_UNUSABLE` (`unusable`); the supervisor then stops the others and exits non-zero: starting it again
  would fail again, forever. Any other exit is restarted after a backoff that doubles up to `MAX_BACKOFF_S`; a child
  that exits `CRASH_LOOP` times in a row, each within `STABLE_S` of its start, stops the supervisor too (one line).
- Every process stops within a bounded time of SIGTERM (`exit_within`): a clean stop that hangs on an unreachable
  Kafka or Redis is cut short. The services make that safe: an aggregator's batch is one atomic Redis script, so a
  batch is applied whole or not at all whenever the process dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from ldpstream.runtime.catalog import Service
from ldpstream.runtime.process import stop_pid

log = logging.getLogger(__name__)

SUPERVISOR_ENV = "LDP_SUPERVISOR_PID"
# "1" when the child was started by the supervisor's main thread: the kernel's parent-death signal follows the thread
# that forked, so a child started from any other thread (a pool's) would be stopped when that thread ends
DEATH_SIGNAL_ENV = "LDP_SUPERVISOR_DEATH_SIGNAL"
EXIT_UNUSABLE = 78  # EX_CONFIG (sysexits.h): cannot run as configured; never restarted
EXIT_ORPHANED = 75  # the child's supervisor died and its clean stop did not finish within STOP_GRACE_S
STOP_GRACE_S = 8.0  # from SIGTERM to exit, at most (then SIGKILL from the supervisor, os._exit from within)
PARENT_POLL_S = 0.5
MAX_BACKOFF_S = 30.0
STABLE_S = 30.0  # a child that ran this long before it exited is not part of a crash loop
CRASH_LOOP = 5
PR_SET_PDEATHSIG = 1


def unusable(program: str, message: str) -> NoReturn:
    """Say in one line why this process cannot run as configured, and exit `EXIT_UNUSABLE` (never restarted)."""
    print(f"{program}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_UNUSABLE)


def exit_within(seconds: float, status: int = 1) -> None:
    """Exit with `status` in `seconds` whatever the process is doing then (a daemon timer: a clean stop that
    finishes first is not delayed). Called when a stop begins."""
    timer = threading.Timer(seconds, os._exit, (status,))
    timer.daemon = True
    timer.start()


def die_with_parent() -> None:
    """Make this process stop when the supervisor named by `SUPERVISOR_ENV` dies (a no-op without it): SIGTERM from
    the kernel on Linux and from a watching thread everywhere, and an exit `STOP_GRACE_S` later at the latest."""
    try:
        parent = int(os.environ.get(SUPERVISOR_ENV, ""))
    except ValueError:
        return
    if sys.platform.startswith("linux") and os.environ.get(DEATH_SIGNAL_ENV) == "1":
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        log.warning("the supervisor (pid %d) is gone: stopping", parent)
        exit_within(STOP_GRACE_S, EXIT_ORPHANED)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def launch(argv: Sequence[str], log_file: Path | None = None, env: dict[str, str] | None = None,
           stdout: int | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in its own process group as a child that dies with this process (`die_with_parent`); its
    output goes to `log_file` (appended), else its stderr to this process's and its stdout to `stdout`."""
    out = open(log_file, "ab") if log_file else stdout  # noqa: SIM115 (the child keeps it)
    try:
        return subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT if log_file else None,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {}), SUPERVISOR_ENV: str(os.getpid()),
                                     DEATH_SIGNAL_ENV: str(int(threading.current_thread() is threading.main_thread()))})
    finally:
        if log_file:
            out.close()  # type: ignore[union-attr]


def start(service: Service, *args: str, log_file: Path | None = None, env: dict[str, str] | None = None,
          stdout: int | None = None) -> subprocess.Popen[bytes]:
    """One process of `service` (its `argv` with `args`), launched as a child that dies with this process."""
    return launch(service.argv(*args), log_file, env, stdout)


def stop(proc: subprocess.Popen[bytes], timeout_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's process group and wait (SIGKILL after `timeout_s`)."""
    if proc.poll() is None:
        stop_pid(proc.pid, timeout_s=timeout_s)
    proc.wait(timeout=5)


@dataclass
class _Slot:
    proc: subprocess.Popen[bytes]
    started: float
    quick_exits: int = 0
    restart_at: float | None = None


@dataclass
class Supervisor:
    """Children started by `start(i)` for i in range(count), kept running until SIGTERM/SIGINT; `on_exit(i, proc)`
    is told of every exit it restarts (to record it, or to clean up after it)."""

    name: str
    count: int
    start: Callable[[int], subprocess.Popen[bytes]]
    on_exit: Callable[[int, subprocess.Popen[bytes]], None] = lambda i, proc: None
    stop_timeout_s: float = STOP_GRACE_S
    slots: list[_Slot] = field(default_factory=list)
    _stopping: bool = False

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (0), or until a child cannot run (1): see the module docstring."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        status = 0
        try:
            self.slots = [_Slot(self.start(i), time.monotonic()) for i in range(self.count)]
            while not self._stopping:
                failure = self._tend()
                if failure is not None:
                    print(f"{self.name}: {failure}", file=sys.stderr, flush=True)
                    status = 1
                    break
                time.sleep(0.2)
        finally:
            exit_within(self.stop_timeout_s + 10.0)  # a hung wait must not keep the supervisor either
            for slot in self.slots:
                if slot.proc.poll() is None:
                    slot.proc.send_signal(signal.SIGTERM)  # all at once: they stop side by side
            deadline = time.monotonic() + self.stop_timeout_s  # one grace for all: a slow first child must not
            for slot in self.slots:                             # give the next a fresh one (SIGKILL at the deadline)
                stop(slot.proc, max(0.0, deadline - time.monotonic()))
        return status

    def _tend(self) -> str | None:
        """Restart the children that exited (after their backoff); why to give up, if so."""
        now = time.monotonic()
        for i, slot in enumerate(self.slots):
            code = slot.proc.poll()
            if code is None or self._stopping:
                continue
            if code == EXIT_UNUSABLE:
                return f"process {i} (pid {slot.proc.pid}) cannot run as configured (its line above says why)"
            if slot.restart_at is None:
                slot.quick_exits = slot.quick_exits + 1 if now - slot.started < STABLE_S else 1
                if slot.quick_exits >= CRASH_LOOP:
                    return (f"process {i} exited {slot.quick_exits} times in a row within {STABLE_S:.0f} s of its "
                            f"start (last status {code}); not restarting it")
                self.on_exit(i, slot.proc)
                backoff = min(MAX_BACKOFF_S, 2.0 ** (slot.quick_exits - 1))
                log.error("%s: process %d (pid %d) exited with %s; restarting in %.0f s", self.name, i, slot.proc.pid,
                          code, backoff)
                slot.restart_at = now + backoff
            elif now >= slot.restart_at:
                self.slots[i] = _Slot(self.start(i), now, slot.quick_exits)
        return None

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.warning("%s: signal %d: stopping %d process(es)", self.name, signum, len(self.slots))
        self._stopping = True
