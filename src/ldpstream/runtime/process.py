"""Background processes with pid files: start detached, check, stop, read the tail of their log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class ServiceError(RuntimeError):
    """A local service could not be started, reached or stopped; the message says why."""


@dataclass(frozen=True)
class ServiceStatus:
    """What `ldp status` shows for one service."""

    name: str
    address: str
    managed: bool
    pid: int | None
    answers: bool
    detail: str = ""
    authentication: str = ""  # what a client must present, probed: "off" when one without credentials is served


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts connections on host:port or the port cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        if s.connect_ex((host, port)) == 0:
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as servers bind: a port whose old connections linger in TIME_WAIT is free, one with a listener is not
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def read_pid(pidfile: Path) -> int | None:
    """The pid in `pidfile` if that process is alive, else None (a stale file is removed)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if pid_alive(pid):
        return pid
    pidfile.unlink(missing_ok=True)
    return None


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state != "Z"


def spawn(argv: list[str], log: Path, pidfile: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start argv detached from our session (it outlives the CLI), stdout+stderr to `log`, pid to `pidfile`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    pidfile.write_text(str(proc.pid))
    return proc


def wait_until(check: Callable[[], bool], alive: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    """Poll `check` until it is true; raise ServiceError with the log's tail if the process dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise ServiceError(f"{what} exited during start-up. Last lines of {log}:\n{tail(log)}")
        time.sleep(0.25)
    raise ServiceError(f"{what} did not become ready within {timeout_s:.0f} s. Last lines of {log}:\n{tail(log)}")


def stop_pid(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL if it hangs."""
    for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.1)
    raise ServiceError(f"process {pid} did not stop")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a text file ('' if it does not exist)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""
