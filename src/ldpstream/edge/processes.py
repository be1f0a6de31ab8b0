"""Edge processes: start one (`python -m ldpstream.edge`) and wait until it answers, stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from ldpstream.runtime.process import stop_pid


def start_edge(port: int, spool_dir: Path, *args: str, host: str = "127.0.0.1", log_file: Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """One `python -m ldpstream.edge` process in its own process group (`args`: more of its options)."""
    argv = [sys.executable, "-m", "ldpstream.edge", "--host", host, "--port", str(port), "--spool-dir", str(spool_dir),
            *args]
    out = open(log_file, "ab") if log_file else None  # noqa: SIM115 (the child keeps it)
    try:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True,
                                env={**os.environ, **(env or {})})
    finally:
        if out is not None:
            out.close()


def wait_live(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0, probe: str = "/healthz") -> None:
    """Wait until the edge at `url` answers `probe` (/healthz: alive; /readyz: ready) with 200 (RuntimeError if it
    exits or time runs out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the edge exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}{probe}", timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"the edge at {url} did not answer within {timeout_s:g} s")


def stop_edge(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM the edge's process group and wait (SIGKILL if it hangs)."""
    if proc.poll() is None:
        stop_pid(proc.pid, timeout_s=timeout_s)
    proc.wait(timeout=5)
